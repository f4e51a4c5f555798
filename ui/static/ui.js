// agentlog ui: clicks on the timeline open a call's details (fetched on demand); a running run's page polls the
// store every 2 s (GET /run/ID/version) and swaps in the new page body when the run changed.
(function () {
  "use strict";
  function $(sel, root) { return (root || document).querySelector(sel); }
  function $all(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }

  function runBase() {
    var main = $("#run-main");
    return main ? "/run/" + encodeURIComponent(main.dataset.run) : null;
  }

  // A call's details are fetched when it is clicked (GET /run/ID/calls?positions=P or ?step=S).
  function showDetails(query, hash) {
    var panel = $("#detail"), body = $("#detail-body"), base = runBase();
    if (!panel || !body || !base) { return; }
    fetch(base + "/calls?" + query, { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (html) {
      body.innerHTML = html;
      panel.hidden = false;
      $all("svg.timeline .call.selected").forEach(function (g) { g.classList.remove("selected"); });
      $all(".call-detail", body).forEach(function (s) {
        var g = $('svg.timeline .call[data-call="' + s.dataset.call + '"]');
        if (g) { g.classList.add("selected"); }
      });
      history.replaceState(null, "", hash);
    });
  }

  function showCall(position) { showDetails("positions=" + encodeURIComponent(position), "#call-" + position); }

  function showStep(step) { showDetails("step=" + encodeURIComponent(step), "#step-" + step); }

  function restoreSelection() {
    var hash = location.hash;
    if (hash.indexOf("#call-") === 0) { showCall(hash.slice(6)); }
    else if (hash.indexOf("#step-") === 0) { showStep(hash.slice(6)); }
  }

  document.addEventListener("click", function (ev) {
    var target = ev.target;
    if (!(target instanceof Element)) { return; }
    if (target.closest("#detail .close")) { $("#detail").hidden = true; return; }
    var call = target.closest("[data-call]");
    if (call && !call.closest("#detail")) {
      ev.preventDefault(); showCall(call.getAttribute("data-call")); return;
    }
    var step = target.closest("svg.timeline .step-row");
    if (step) { showStep(step.getAttribute("data-step")); }
  });
  document.addEventListener("keydown", function (ev) {
    var el = ev.target;
    if (ev.key === "Enter" && el instanceof Element && el.matches("svg.timeline .call")) { showCall(el.getAttribute("data-call")); }
    if (ev.key === "Escape" && $("#detail")) { $("#detail").hidden = true; }
  });

  function poll() {
    var main = $("#run-main");
    if (!main || main.dataset.status !== "running") { return; }
    var base = "/run/" + encodeURIComponent(main.dataset.run);
    fetch(base + "/version", { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (v) {
      if (v.version === main.dataset.version) { return null; }
      return fetch(base + "/main", { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (html) {
        var scroll = $(".timeline-wrap") ? $(".timeline-wrap").scrollLeft : 0;
        main.innerHTML = html;
        main.dataset.version = v.version;
        main.dataset.status = v.status;
        if ($(".timeline-wrap")) { $(".timeline-wrap").scrollLeft = scroll; }
        restoreSelection();
      });
    }).catch(function () { /* the store is busy or gone: try again at the next tick */ })
      .then(function () { window.setTimeout(poll, 2000); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    restoreSelection();
    window.setTimeout(poll, 2000);
  });
}());
