// zuke serve's web view: keep the page's live region current, without reloading it.
// The server pushes the region's new HTML (already escaped) as server-sent events.
(function () {
  "use strict";
  var region = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!region || !region.getAttribute("data-live") || !window.EventSource) {
    return;
  }
  function say(text) {
    if (status) {
      status.textContent = text;
    }
  }
  var source = new EventSource(region.getAttribute("data-live"));
  source.addEventListener("open", function () {
    say("Live");
    document.documentElement.setAttribute("data-live", "open");
  });
  source.addEventListener("update", function (event) {
    var active = document.activeElement;
    var focused = active && region.contains(active) ? active.id : "";
    region.innerHTML = event.data;
    if (focused) {
      var again = document.getElementById(focused);
      if (again) {
        again.focus();
      }
    }
    say("Live · updated " + new Date().toLocaleTimeString());
    document.documentElement.setAttribute("data-updates",
      String(Number(document.documentElement.getAttribute("data-updates") || "0") + 1));
  });
  source.addEventListener("stale", function (event) {
    say(event.data);
  });
  source.addEventListener("gone", function (event) {
    say(event.data);
    source.close();
  });
  source.addEventListener("error", function () {
    if (source.readyState === EventSource.CLOSED) {
      say("Live updates stopped: reload the page");
    } else {
      say("Reconnecting…");
    }
  });
})();
