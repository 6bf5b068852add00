// jobttl console: the one script, optional. Countdowns tick; everything else works without it.
(function () {
  "use strict";
  function span(seconds) {
    var s = Math.abs(Math.round(seconds)), d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600),
        m = Math.floor(s % 3600 / 60), r = s % 60, parts = [];
    if (d) parts.push(d + "d");
    if (h) parts.push(h + "h");
    if (m && !d) parts.push(m + "m");
    if (!d) parts.push(r + "s");
    return parts.join(" ");
  }
  function tick() {
    var now = Date.now() / 1000;
    document.querySelectorAll(".countdown[data-due]").forEach(function (el) {
      var left = parseFloat(el.getAttribute("data-due")) - now;
      el.textContent = left < 0 ? "overdue " + span(-left) : "in " + span(left);
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    tick();
    setInterval(tick, 1000);
    var confirm = document.getElementById("confirm-held");
    if (confirm) {
      confirm.form.addEventListener("submit", function (event) {
        if (!window.confirm(confirm.textContent.trim() + "? They are deleted by the workers.")) event.preventDefault();
      });
    }
  });
})();
