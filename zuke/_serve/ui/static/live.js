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
  // What the reader did inside the region survives an update: the element focused, the
  // sections opened or closed, how far a scrolled box (the graph) was scrolled.
  function kept() {
    var state = { focused: "", open: {}, scroll: {} };
    var active = document.activeElement;
    if (active && region.contains(active)) {
      state.focused = active.id;
    }
    region.querySelectorAll("details[id]").forEach(function (d) {
      state.open[d.id] = d.open;
    });
    region.querySelectorAll("[data-keep-scroll][id]").forEach(function (e) {
      state.scroll[e.id] = [e.scrollLeft, e.scrollTop];
    });
    return state;
  }
  function restore(state) {
    Object.keys(state.open).forEach(function (id) {
      var d = document.getElementById(id);
      if (d) {
        d.open = state.open[id];
      }
    });
    Object.keys(state.scroll).forEach(function (id) {
      var e = document.getElementById(id);
      if (e) {
        e.scrollLeft = state.scroll[id][0];
        e.scrollTop = state.scroll[id][1];
      }
    });
    var again = state.focused ? document.getElementById(state.focused) : null;
    if (again) {
      again.focus();
    }
  }
  source.addEventListener("update", function (event) {
    var state = kept();
    region.innerHTML = event.data;
    restore(state);
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
