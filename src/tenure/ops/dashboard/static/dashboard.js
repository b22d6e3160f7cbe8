// Keeps the overview live: fetches its fragment every few seconds and swaps it in, unless the
// operator is typing a reason into one of its forms (a swap would throw the text away).
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) {
    return;
  }
  var url = live.getAttribute("data-live-url");
  var seconds = parseInt(live.getAttribute("data-live-seconds"), 10) || 5;

  function busy() {
    var active = document.activeElement;
    return active && live.contains(active) && active.tagName === "INPUT" && active.value !== "";
  }

  function refresh() {
    if (document.hidden || busy()) {
      return;
    }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        live.innerHTML = html;
        live.removeAttribute("data-stale");
      })
      .catch(function () {
        live.setAttribute("data-stale", "true");
      });
  }

  window.setInterval(refresh, seconds * 1000);
})();
