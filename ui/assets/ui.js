// Styrmin UI: live pages. A page whose body has data-refresh reloads its
// content every so many seconds, keeping the "Show output" sections that
// are open. The pages work without this script; it is served from the
// handler itself, as the Content-Security-Policy requires.
(function () {
  "use strict";
  var seconds = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  if (!seconds || !window.fetch || !window.DOMParser) {
    return;
  }
  function refresh() {
    if (document.hidden) {
      return;
    }
    // Not while someone types in a filter or holds a choice open.
    var active = document.activeElement;
    if (active && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(active.tagName)) {
      return;
    }
    var open = {};
    document.querySelectorAll("details[id][open]").forEach(function (d) { open[d.id] = true; });
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("content");
        var here = document.getElementById("content");
        if (!fresh || !here) {
          return;
        }
        here.replaceWith(fresh);
        Object.keys(open).forEach(function (id) {
          var d = document.getElementById(id);
          if (d) { d.open = true; }
        });
        if (!doc.body.hasAttribute("data-refresh")) {
          document.body.removeAttribute("data-refresh");
          window.clearInterval(timer);
        }
      })
      .catch(function () {
        var live = document.getElementById("live");
        if (live) { live.textContent = "not updating: the server did not answer"; }
      });
  }
  var timer = window.setInterval(refresh, seconds * 1000);
}());
