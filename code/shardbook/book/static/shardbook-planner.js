/* The planner page: the form a cell of chapters/99_planner.md wrote, run by
   the book's own planner (shardbook.planner.page.plan) in Pyodide, loaded on
   the first press through the live mode's loader
   (window.shardbookLive.loadPython, shardbook-live.js). The ranked meshes
   become a table and two stacked bars per candidate (memory per device by
   component against HBM; the expected step by component), drawn here as
   SVG from the planner's numbers. */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"];

  function el(tag, attrs, text) {
    var node = tag.indexOf("svg:") === 0 ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function formValues(form) {
    var out = {};
    [].forEach.call(form.querySelectorAll("[name]"), function (f) { out[f.name] = f.value; });
    return out;
  }

  // one stacked bar per candidate: parts {name: value}, a limit line (HBM) if given
  function stackedBars(title, rows, unit, scale, limit, limitLabel, width) {
    var names = [];
    rows.forEach(function (r) { Object.keys(r.parts).forEach(function (k) { if (r.parts[k] > 0 && names.indexOf(k) < 0) { names.push(k); } }); });
    var max = Math.max.apply(null, rows.map(function (r) { return Object.values(r.parts).reduce(function (a, b) { return a + b; }, 0); }).concat([limit || 0])) || 1;
    // drawn at the width it is shown at, so that its 11-12 px text stays 11-12 px on a phone
    var W = Math.max(300, Math.min(720, Math.round(width || 640))), left = Math.min(150, Math.round(W * 0.36)), right = 64;
    var perRow = Math.max(1, Math.floor(W / 150)), barH = 22, gap = 10, top = 28, legendH = 20 * Math.ceil(names.length / perRow) + 10;
    var H = top + rows.length * (barH + gap) + 24 + legendH;
    var svg = el("svg:svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img", "aria-label": title, "class": "shardbook-planner-chart" });
    svg.appendChild(el("svg:text", { x: 0, y: 16, "font-size": 14, "font-weight": "bold" }, title));
    var x = function (v) { return left + (W - left - right) * v / max; };
    rows.forEach(function (r, i) {
      var y = top + i * (barH + gap), at = 0;
      svg.appendChild(el("svg:text", { x: left - 6, y: y + barH * 0.7, "text-anchor": "end", "font-size": 11 }, r.label));
      names.forEach(function (k, j) {
        var v = r.parts[k] || 0;
        if (v <= 0) { return; }
        var rect = el("svg:rect", { x: x(at), y: y, width: Math.max(0.5, x(at + v) - x(at)), height: barH, fill: COLORS[j % COLORS.length] });
        rect.appendChild(el("svg:title", {}, r.label + ": " + k + " " + (v / scale).toFixed(2) + " " + unit));
        svg.appendChild(rect);
        at += v;
      });
      svg.appendChild(el("svg:text", { x: x(at) + 4, y: y + barH * 0.7, "font-size": 11 }, (at / scale).toFixed(1) + " " + unit));
    });
    var bottom = top + rows.length * (barH + gap);
    if (limit) {
      svg.appendChild(el("svg:line", { x1: x(limit), x2: x(limit), y1: top - 6, y2: bottom, stroke: "#000", "stroke-dasharray": "4 3" }));
      svg.appendChild(el("svg:text", { x: x(limit), y: bottom + 14, "font-size": 11, "text-anchor": "end" }, limitLabel));
    }
    names.forEach(function (k, j) {
      var lx = (j % perRow) * 150, ly = bottom + 30 + Math.floor(j / perRow) * 20;
      svg.appendChild(el("svg:rect", { x: lx, y: ly - 10, width: 12, height: 12, fill: COLORS[j % COLORS.length] }));
      svg.appendChild(el("svg:text", { x: lx + 16, y: ly, "font-size": 12 }, k.replace(/_/g, " ")));
    });
    return svg;
  }

  function grouped(v, digits) { return v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits }); }

  function render(out, result) {
    out.textContent = "";
    if (!result.ok) {
      out.appendChild(el("p", { "class": "shardbook-planner-error", role: "alert" }, "The planner cannot run this: " + result.error));
      return;
    }
    out.appendChild(el("p", { "class": "shardbook-planner-title" }, result.title));
    out.appendChild(el("p", {}, result.model));
    if (result.accelerator_note) { out.appendChild(el("p", {}, result.accelerator_note)); }
    if (result.note) { out.appendChild(el("p", { "class": "shardbook-planner-error", role: "alert" }, result.note)); }
    if (result.reserve) { out.appendChild(el("p", {}, result.reserve)); }
    var wrap = el("div", { "class": "shardbook-planner-table" });
    var table = el("table", { "class": "table" });
    var head = el("tr");
    // the mesh and how it runs, as the command line's table shows them (a precision column where a row runs FP8)
    var fp8 = result.top.some(function (c) { return c.precision !== "bf16"; });
    ["rank", "mesh", "schedule", "micro", "recompute", "weights"].concat(fp8 ? ["precision"] : [],
      ["fits", "memory+reserve / HBM (GB)", "expected step (ms)", "band (ms)", "", "tokens/s per device", "expected MFU", "bound step (ms)", "bound MFU"]).forEach(function (h) { head.appendChild(el("th", {}, h)); });
    table.appendChild(head);
    result.top.forEach(function (c, i) {
      // the step's memory and the reserve, as the command line's column and the bar below
      var mem = Object.values(c.memory_bytes).reduce(function (a, b) { return a + b; }, c.reserve_bytes || 0);
      var row = el("tr");
      [String(i + 1), c.label, c.schedule_text, String(c.micro_batch_seqs), c.recompute, c.weights_text].concat(fp8 ? [c.precision.toUpperCase()] : [],
       [c.fits_text, grouped(mem / 1e9, 1) + " / " + grouped(c.hbm_bytes / 1e9, 1),
       grouped(c.expected_step_s * 1e3, 0), grouped(c.band_s[0] * 1e3, 0) + "–" + grouped(c.band_s[1] * 1e3, 0),
       c.tie ? "tie" : "", grouped(c.tokens_per_s_per_device, 0), (c.expected_mfu * 100).toFixed(1) + " %",
       grouped(c.step_s * 1e3, 0), (c.mfu * 100).toFixed(1) + " %"]).forEach(function (v, j) {
        row.appendChild(el("td", j === 1 || j === 2 ? { style: "white-space: nowrap" } : {}, v));
      });
      table.appendChild(row);
    });
    wrap.appendChild(table);
    // in the figures' frame, with their cue when it scrolls sideways (pages.FRAME_SOURCE)
    out.appendChild(window.shardbookFrame ? window.shardbookFrame(wrap) : wrap);
    (result.notes || []).forEach(function (n) { out.appendChild(el("p", { "class": "shardbook-planner-note" }, n)); });
    var hbm = result.top.length ? result.top[0].hbm_bytes : 0;
    var width = out.clientWidth;
    out.appendChild(stackedBars("Memory per device by component", result.top.map(function (c) { return { label: c.label, parts: Object.assign({}, c.memory_bytes, { reserve: c.reserve_bytes || 0 }) }; }), "GB", 1e9, hbm, "HBM " + grouped(hbm / 1e9, 1) + " GB", width));
    out.appendChild(stackedBars("Expected step time by component", result.top.map(function (c) { return { label: c.label, parts: c.time_s }; }), "s", 1, 0, "", width));
  }

  function init() {
    var box = document.querySelector("div.shardbook-planner");
    if (!box) { return; }
    var form = box.querySelector("form");
    var button = box.querySelector("button.shardbook-planner-run");
    var status = box.querySelector(".shardbook-planner-status");
    var out = box.querySelector(".shardbook-planner-output");
    var py = null;
    form.addEventListener("submit", function (e) { e.preventDefault(); });
    button.disabled = false;
    button.addEventListener("click", async function () {
      button.disabled = true;
      try {
        if (!py) {
          if (!window.shardbookLive) { throw new Error("the live mode's script (shardbook-live.js) did not load"); }
          py = await window.shardbookLive.loadPython(status, box);
          py.runPython("from shardbook.planner.page import plan");
        }
        status.textContent = "Planning…";
        py.globals.set("__planner_form", JSON.stringify(formValues(form)));
        var result = JSON.parse(py.runPython("json.dumps(plan(__planner_form))"));
        render(out, result);
        status.textContent = "Python is loaded: change the inputs and plan again.";
        box.dataset.state = result.ok ? "ready" : "refused";
      } catch (err) {
        out.textContent = "";  // no earlier plan stays on screen under a failure, as if it still held
        status.textContent = "The planner failed: " + (window.shardbookLive ? window.shardbookLive.lastLine(err) : String(err));
        box.dataset.state = "failed";
      }
      button.textContent = "Plan again";
      button.disabled = false;
    });
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); } else { init(); }
})();
