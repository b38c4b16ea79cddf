// Progressive enhancements only: every page reads and every form posts without JavaScript.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const field = document.querySelector(button.dataset.copy);
  if (!field) return;
  field.select();
  const done = () => { button.textContent = "Copied"; };
  if (navigator.clipboard) navigator.clipboard.writeText(field.value).then(done, () => document.execCommand("copy") && done());
  else if (document.execCommand("copy")) done();
});

// The numbers as the server-rendered pages write them (apps/console/templatetags/console_dash.py: the
// same thresholds, halves rounded away from zero as toFixed does), for figures a script adds: the
// playground's.
window.ConsoleFormat = (() => {
  function dollars(value) {
    if (value === null || value === undefined || value === "") return "";
    let amount = Number(value);
    if (!Number.isFinite(amount)) return String(value);
    if (amount === 0) return "$0";
    const sign = amount < 0 ? "-" : "";
    amount = Math.abs(amount);
    if (amount < 1) {
      const places = Math.max(2, 1 - Math.floor(Math.log10(amount))); // two significant digits
      const rounded = amount.toFixed(places);
      if (Number(rounded) < 1) {
        const [whole, fraction] = rounded.split(".");
        return sign + "$" + whole + "." + fraction.replace(/0+$/, "").padEnd(2, "0");
      }
      amount = Number(rounded);
    }
    return sign + "$" + Number(amount.toFixed(2)).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }

  function compact(value) {
    const number = Math.trunc(Number(value) || 0);
    const units = [[1e9, "B"], [1e6, "M"], [1e3, "k"]];
    for (let index = 0; index < units.length; index += 1) {
      let [size, suffix] = units[index];
      if (Math.abs(number) < size) continue;
      let scaled = (number / size).toFixed(Math.abs(number) < 100 * size ? 1 : 0);
      if (Math.abs(Number(scaled)) >= 1000 && index > 0) { // 999,950 reads "1M", not "1000k"
        [size, suffix] = units[index - 1];
        scaled = (number / size).toFixed(1);
      }
      return scaled.replace(/\.0$/, "") + suffix;
    }
    return String(number);
  }

  function duration(milliseconds) {
    if (milliseconds === null || milliseconds === undefined || milliseconds === "") return "—";
    const ms = Number(milliseconds);
    if (!Number.isFinite(ms)) return "—";
    if (ms < 9.95) return ms.toFixed(1) + " ms";
    if (ms < 999.5) return ms.toFixed(0) + " ms";
    const seconds = ms / 1000;
    if (seconds < 9.995) return seconds.toFixed(2) + " s";
    if (seconds < 59.95) return seconds.toFixed(1) + " s";
    const whole = Math.round(seconds);
    return Math.floor(whole / 60) + " min " + (whole % 60) + " s";
  }

  return { dollars, compact, duration };
})();
