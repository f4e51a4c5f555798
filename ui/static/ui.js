// agentlog ui: clicks on the timeline open a call's details (fetched on demand); a running run's page polls the
// store every 2 s (GET /run/ID/version) and swaps in the new page body when the run changed, and shows the
// run's stream as it arrives (GET /run/ID/stream, server-sent events) in its live panel.
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

  // A running run's live panel: its stream as server-sent events (GET /run/ID/stream), tokens
  // included; a line per call attempt, an attempt a retry or a crash replaced struck through.
  function live() {
    var panel = $("#live");
    if (!panel || typeof EventSource === "undefined") { return; }
    var steps = $(".live-steps", panel), state = $(".live-state", panel), lines = {};
    var source = new EventSource("/run/" + encodeURIComponent(panel.dataset.run) + "/stream");
    function line(pos, attempt) {
      var key = pos + "/" + attempt;
      if (!lines[key]) {
        var li = document.createElement("li");
        li.className = "live-call";
        li.dataset.position = pos;
        li.dataset.attempt = attempt;
        li.innerHTML = '<span class="live-head"></span> <span class="live-text"></span>';
        steps.appendChild(li);
        lines[key] = li;
      }
      return lines[key];
    }
    function note(text) {
      var li = document.createElement("li");
      li.className = "live-note";
      li.textContent = text;
      steps.appendChild(li);
    }
    source.onopen = function () { state.textContent = "following the run as it works"; };
    source.onmessage = function (msg) {
      var e = JSON.parse(msg.data), d = e.data || {};
      if (e.kind === "attempt") {
        $(".live-head", line(e.position, e.attempt)).textContent = "[" + e.position + "] " + d.call + " " + d.name + " (attempt " + e.attempt + ")" + (d.sealed ? ": contents sealed, not streamed" : "");
      } else if (e.kind === "delta") {
        $(".live-text", line(e.position, e.attempt)).textContent += d.text;
      } else if (e.kind === "superseded") {
        $all('.live-call[data-position="' + e.position + '"]', steps).forEach(function (li) { li.classList.add("superseded"); });
      } else if (e.kind === "completed" || e.kind === "failed") {
        var li = line(e.position, e.attempt);
        li.classList.add(e.kind);
        if (!$(".live-head", li).textContent) { $(".live-head", li).textContent = "[" + e.position + "]"; }
      } else if (e.kind === "waiting") {
        note("[" + e.position + "] waiting for " + d["for"] + " " + d.name);
      } else if (e.kind === "gap") {
        note("(gap) " + d.reason);
      } else if (e.kind === "ended") {
        note("run " + d.status);
        state.textContent = "the run ended";
        source.close();
      }
    };
    source.onerror = function () { state.textContent = "reconnecting to the run's stream\u2026"; };
  }

  document.addEventListener("DOMContentLoaded", function () {
    restoreSelection();
    live();
    window.setTimeout(poll, 2000);
  });
}());
