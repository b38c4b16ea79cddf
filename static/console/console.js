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
// same thresholds, halves rounded up), for figures a script adds: the playground's. Rounding moves the
// decimal point in the number's text, as the server's Decimal does: toFixed alone rounds the binary
// value, which reads 1.005 as 1.00.
window.ConsoleFormat = (() => {
  function shift(value, places) {
    const [mantissa, exponent] = String(value).split("e");
    return Number(`${mantissa}e${Number(exponent || 0) + places}`);
  }

  function rounded(value, places) {
    // Halves away from zero on the decimal value; the text with exactly `places` decimals.
    const sign = value < 0 ? -1 : 1;
    return (sign * shift(Math.round(shift(Math.abs(value), places)), -places)).toFixed(places);
  }

  function dollars(value) {
    if (value === null || value === undefined || value === "") return "";
    let amount = Number(value);
    if (!Number.isFinite(amount)) return String(value);
    if (amount === 0) return "$0";
    const sign = amount < 0 ? "-" : "";
    amount = Math.abs(amount);
    if (amount < 1) {
      const places = Math.max(2, 1 - Math.floor(Math.log10(amount))); // two significant digits
      const text = rounded(amount, places);
      if (Number(text) < 1) {
        const [whole, fraction] = text.split(".");
        return sign + "$" + whole + "." + fraction.replace(/0+$/, "").padEnd(2, "0");
      }
      amount = Number(text);
    }
    return sign + "$" + Number(rounded(amount, 2)).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }

  function compact(value) {
    const number = Math.trunc(Number(value) || 0);
    const units = [[9, "B"], [6, "M"], [3, "k"]];
    for (let index = 0; index < units.length; index += 1) {
      let [power, suffix] = units[index];
      if (Math.abs(number) < 10 ** power) continue;
      let scaled = rounded(shift(number, -power), Math.abs(number) < 100 * 10 ** power ? 1 : 0);
      if (Math.abs(Number(scaled)) >= 1000 && index > 0) { // 999,950 reads "1M", not "1000k"
        [power, suffix] = units[index - 1];
        scaled = rounded(shift(number, -power), 1);
      }
      return scaled.replace(/\.0$/, "") + suffix;
    }
    return String(number);
  }

  function duration(milliseconds) {
    if (milliseconds === null || milliseconds === undefined || milliseconds === "") return "—";
    const ms = Number(milliseconds);
    if (!Number.isFinite(ms)) return "—";
    if (ms < 9.95) return rounded(ms, 1) + " ms";
    if (ms < 999.5) return rounded(ms, 0) + " ms";
    const seconds = shift(ms, -3);
    if (seconds < 9.995) return rounded(seconds, 2) + " s";
    if (seconds < 59.95) return rounded(seconds, 1) + " s";
    const whole = Number(rounded(seconds, 0));
    return Math.floor(whole / 60) + " min " + (whole % 60) + " s";
  }

  return { dollars, compact, duration };
})();
