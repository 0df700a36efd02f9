// ax dashboard: live updates by polling (see package ui's doc). Every 2 s
// the page asks for itself with X-Ax-Partial and swaps in #live's content.
// At most one request in flight; nothing while the tab is hidden or while
// the user is in a form of the page; back-off up to 30 s after errors.
(function () {
  "use strict";
  var main = document.getElementById("live");
  var status = document.getElementById("live-status");
  var base = main ? parseInt(main.getAttribute("data-live"), 10) : 0;
  var delay = base, busy = false, timer = null;

  function editing() {
    var a = document.activeElement;
    if (a && main.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName)) return true;
    return main.querySelector("input[type=checkbox]:checked") !== null;
  }
  function schedule() {
    clearTimeout(timer);
    if (!document.hidden) timer = setTimeout(tick, delay);
  }
  function tick() {
    if (busy || document.hidden) return;
    if (editing()) { schedule(); return; }
    busy = true;
    var ctl = new AbortController();
    var abort = setTimeout(function () { ctl.abort(); }, 5000);
    fetch(location.pathname + location.search, {
      headers: { "X-Ax-Partial": "1" }, credentials: "same-origin", signal: ctl.signal
    }).then(function (r) {
      if (r.status === 401) { location.reload(); throw new Error("logged out"); }
      // Keep what is shown when the node failed to answer (the error
      // banner is outside the swapped content).
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.text();
    }).then(function (html) {
      if (!editing()) { main.innerHTML = html; wire(); }
      delay = base;
      if (status) { status.textContent = "live"; status.className = "live"; }
    }).catch(function () {
      delay = Math.min(delay * 2, 30000);
      if (status) { status.textContent = "offline"; status.className = "live off"; }
    }).finally(function () {
      clearTimeout(abort); busy = false; schedule();
    });
  }
  // wire adds the behaviour of the content: "select all" boxes.
  function wire() {
    var boxes = main.querySelectorAll("input.select-all");
    for (var i = 0; i < boxes.length; i++) {
      boxes[i].addEventListener("change", function (e) {
        var form = e.target.closest("form");
        var ids = form.querySelectorAll("input[name=id]");
        for (var j = 0; j < ids.length; j++) ids[j].checked = e.target.checked;
      });
    }
  }
  if (!main) return;
  wire();
  if (!base) return;
  if (status) { status.textContent = "live"; }
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) clearTimeout(timer); else { delay = base; schedule(); }
  });
  schedule();
})();
