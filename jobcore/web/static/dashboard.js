// jobcore dashboard: auto-refresh of the overview and a confirmation before single-job writes.
// No inline script anywhere: the pages' Content-Security-Policy allows this file only.
(function () {
  "use strict";
  var KEY = "jobcore-auto-refresh";
  document.addEventListener("DOMContentLoaded", function () {
    var seconds = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
    var box = document.getElementById("auto-refresh");
    if (seconds > 0) {
      var on = window.sessionStorage.getItem(KEY) !== "off";
      if (box) {
        box.checked = on;
        box.addEventListener("change", function () {
          window.sessionStorage.setItem(KEY, box.checked ? "on" : "off");
          if (box.checked) { window.location.reload(); }
        });
      }
      window.setTimeout(function () {
        if ((!box || box.checked) && document.visibilityState !== "hidden") { window.location.reload(); }
      }, seconds * 1000);
    }
    Array.prototype.forEach.call(document.querySelectorAll("form[data-confirm]"), function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
      });
    });
  });
})();
