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

// The numbers as the server-rendered pages write them (apps/console/templatetags/console_dash.py), for
// rows and figures a script adds: the live tail's, the playground's.
window.ConsoleFormat = (() => {
  function dollars(value) {
    let amount = Number(value);
    if (!Number.isFinite(amount) || amount === 0) return "$0";
    const sign = amount < 0 ? "-" : "";
    amount = Math.abs(amount);
    if (amount < 1) {
      const places = Math.max(2, 1 - Math.floor(Math.log10(amount))); // two significant digits
      amount = Number(amount.toFixed(places));
      if (amount < 1) {
        const [whole, fraction] = amount.toFixed(places).split(".");
        return sign + "$" + whole + "." + fraction.replace(/0+$/, "").padEnd(2, "0");
      }
    }
    return sign + "$" + amount.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }

  function compact(value) {
    const number = Math.trunc(Number(value) || 0);
    for (const [size, suffix] of [[1e9, "B"], [1e6, "M"], [1e3, "k"]]) {
      if (Math.abs(number) >= size) {
        const scaled = number / size;
        return (Math.abs(scaled) < 100 ? scaled.toFixed(1) : scaled.toFixed(0)).replace(/\.0$/, "") + suffix;
      }
    }
    return String(number);
  }

  function duration(milliseconds) {
    if (milliseconds === null || milliseconds === undefined || milliseconds === "") return "—";
    const ms = Number(milliseconds);
    if (ms < 10) return ms.toFixed(1) + " ms";
    if (ms < 999.5) return ms.toFixed(0) + " ms";
    const seconds = ms / 1000;
    if (seconds < 60) return seconds.toFixed(seconds < 10 ? 2 : 1) + " s";
    const whole = Math.round(seconds);
    return Math.floor(whole / 60) + " min " + (whole % 60) + " s";
  }

  return { dollars, compact, duration };
})();
