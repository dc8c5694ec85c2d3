/* Instant charts (shardbook.book.charts): each figure carries the values the
   book's Python computed at build time over its sliders' grid. Dragging a
   slider only looks values up and redraws the SVG; nothing is fetched. A
   value typed off the grid is computed, on request, by the chart's own
   Python function in the browser (the live mode's loader,
   window.shardbookLive.loadPython). */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var HEIGHT = 300, LEFT = 62, RIGHT = 14, TOP = 12, BOTTOM = 42;

  function el(tag, attrs, text) {
    var node = tag.indexOf("svg:") === 0 ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function fixed(v, digits) { return v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits }); }
  function short(v) {  // an axis tick: at most three significant digits, thousands grouped
    var a = Math.abs(v);
    if (a === 0) { return "0"; }
    if (a >= 1000) { return v.toLocaleString("en-US", { maximumFractionDigits: 0 }); }
    return Number(v.toPrecision(3)).toLocaleString("en-US", { maximumFractionDigits: 6 });
  }
  function valueText(v) { return typeof v === "number" ? v.toLocaleString("en-US", { maximumFractionDigits: 12 }) : String(v); }

  // Strict parsing of a typed value against the slider's domain (ledger.number_input)
  function parse(spec, raw) {
    var text = String(raw).trim();
    var ok = spec.kind === "integer" ? /^[+-]?\d+$/.test(text) : /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text);
    var value = Number(text);
    var domain = (spec.kind === "integer" ? "a whole number" : "a number") + " from " + valueText(spec.minimum) + " to " + valueText(spec.maximum) + (spec.unit ? " " + spec.unit : "");
    if (!ok || !isFinite(value) || value < spec.minimum || value > spec.maximum) {
      return { error: (spec.label || spec.name) + ": must be " + domain + ", got \"" + text + "\"" };
    }
    return { value: value };
  }

  // One Python for every chart of the page, started on the first request
  var pyPromise = null;
  var HELPER = [
    "def __chart_points(fn, inputs, calls, keys):",
    "    inputs = json.loads(inputs)",
    "    out = []",
    "    for args in json.loads(calls):",
    "        args = {k: ledger.check_input(inputs[k], v) for k, v in args.items()}",
    "        try:",
    "            r = fn(**args)",
    "        except ValueError:",
    "            out.append(None)",
    "            continue",
    "        out.append([r[k] for k in json.loads(keys)])",
    "    return json.dumps(out)",
  ].join("\n");
  function python(status, box) {
    if (!pyPromise) {
      if (!window.shardbookLive) { return Promise.reject(new Error("the live mode's script (shardbook-live.js) did not load")); }
      pyPromise = window.shardbookLive.loadPython(status, box).then(function (py) { py.runPython(HELPER); return py; });
      pyPromise.catch(function () { pyPromise = null; });
    }
    return pyPromise;
  }

  function Chart(fig) {
    var spec = JSON.parse(fig.querySelector("script.shardbook-chart-data").textContent);
    this.fig = fig; this.spec = spec;
    this.controls = spec.sliders.concat([spec.x]);
    this.index = this.controls.map(function (c) { return c.values.indexOf(c.default); });
    this.off = this.controls.map(function () { return null; });  // a typed value off the grid
    this.custom = null;  // {key: "...", curve: {series: [values over x]}, point: {series: value}} from Python
    this.keys = spec.series.map(function (s) { return s.key; });
    this.plot = fig.querySelector(".shardbook-chart-plot");
    this.readout = fig.querySelector(".shardbook-chart-readout");
    this.offgrid = fig.querySelector(".shardbook-chart-offgrid");
    this.build();
    this.draw();
    var self = this, width = this.plot.clientWidth;
    window.addEventListener("resize", function () {
      if (self.plot.clientWidth !== width) { width = self.plot.clientWidth; self.draw(); }
    }, { passive: true });
    fig.dataset.state = "ready";
  }

  Chart.prototype.value = function (j) {
    var c = this.controls[j];
    return this.off[j] !== null ? this.off[j] : c.values[this.index[j]];
  };

  Chart.prototype.build = function () {
    var self = this, box = this.fig.querySelector(".shardbook-chart-controls");
    this.fields = [];
    this.ranges = [];
    this.controls.forEach(function (c, j) {
      var row = el("div", { "class": "shardbook-chart-control" });
      var id = "chart-" + self.spec.name + "-" + c.name;
      var label = el("label", { "for": id }, (c.spec.label || c.name) + (c.spec.unit ? " (" + c.spec.unit + ")" : ""));
      row.appendChild(label);
      var range = el("input", { type: "range", id: id, min: 0, max: c.values.length - 1, step: 1, value: self.index[j], name: c.name });
      range.setAttribute("aria-valuetext", valueText(c.values[self.index[j]]));
      row.appendChild(range);
      var field = el("input", { type: "text", "class": "shardbook-chart-field", "aria-label": (c.spec.label || c.name) + ", any value", value: valueText(c.values[self.index[j]]) });
      field.inputMode = c.spec.kind === "choice" ? "text" : (c.spec.kind === "integer" ? "numeric" : "decimal");
      if (c.spec.kind === "choice") { field.readOnly = true; field.tabIndex = -1; field.className += " shardbook-chart-choice"; }
      row.appendChild(field);
      range.addEventListener("input", function (event) {
        self.index[j] = Number(range.value);
        self.off[j] = null;
        // curves Python computed for a typed value stay while only x moves
        if (j !== self.controls.length - 1) { self.custom = null; }
        field.value = valueText(c.values[self.index[j]]);
        range.setAttribute("aria-valuetext", field.value);
        self.offgrid.textContent = "";
        self.timedDraw(event);
      });
      field.addEventListener("change", function (event) { self.typed(j, field.value, event); });
      self.fields.push(field);
      self.ranges.push(range);
      box.appendChild(row);
    });
  };

  // A typed value: on the grid, the slider moves there; off it, the chart's
  // Python computes it once the reader asks.
  Chart.prototype.typed = function (j, raw, event) {
    var c = this.controls[j], parsed = parse(c.spec, raw);
    this.offgrid.textContent = "";
    if (parsed.error) { this.offgrid.textContent = parsed.error; return; }
    var k = c.values.indexOf(parsed.value);
    if (k >= 0) {
      this.index[j] = k; this.off[j] = null;
      if (j !== this.controls.length - 1) { this.custom = null; }
      this.ranges[j].value = k;
      this.timedDraw(event);
      return;
    }
    this.off[j] = parsed.value;
    if (j !== this.controls.length - 1) { this.custom = null; }
    var self = this;
    var note = el("span", {}, (c.spec.label || c.name) + " = " + valueText(parsed.value) + " lies between the values computed for this page. ");
    var button = el("button", { type: "button", "class": "shardbook-chart-python" }, "Compute it with the book's Python (about 13 MB, loaded once)");
    button.addEventListener("click", function () { self.compute(button); });
    this.offgrid.appendChild(note);
    this.offgrid.appendChild(button);
    this.draw();
  };

  // the calls for the current inputs: the whole x grid (and the typed x, if any)
  Chart.prototype.calls = function () {
    var args = {}, self = this, last = this.controls.length - 1;
    this.controls.forEach(function (c, j) { if (j < last) { args[c.name] = self.value(j); } });
    var xs = this.spec.x.values.slice();
    if (this.off[last] !== null) { xs.push(this.off[last]); }
    return xs.map(function (x) { var a = Object.assign({}, args); a[self.spec.x.name] = x; return a; });
  };

  Chart.prototype.compute = async function (button) {
    var self = this, spec = this.spec;
    button.disabled = true;
    try {
      var py = await python(button, this.fig);
      if (!this.defined) { py.runPython(spec.source); this.defined = true; }
      button.textContent = "Computing…";
      py.globals.set("__chart_inputs", JSON.stringify(this.controls.reduce(function (o, c) { o[c.name] = c.spec; return o; }, {})));
      py.globals.set("__chart_calls", JSON.stringify(this.calls()));
      py.globals.set("__chart_keys", JSON.stringify(this.keys));
      var rows = JSON.parse(py.runPython("__chart_points(" + spec.function + ", __chart_inputs, __chart_calls, __chart_keys)"));
      var n = spec.x.values.length, curve = {}, point = {};
      this.keys.forEach(function (key, s) {
        curve[key] = rows.slice(0, n).map(function (r) { return r === null ? null : r[s]; });
        point[key] = rows.length > n ? (rows[n] === null ? null : rows[n][s]) : null;
      });
      this.custom = { curve: curve, point: point };
      this.offgrid.textContent = "Computed by the book's Python in this page.";
      this.fig.dataset.python = "ready";
      this.draw();
    } catch (err) {
      this.offgrid.textContent = "The book's Python could not compute it: " + (window.shardbookLive ? window.shardbookLive.lastLine(err) : String(err)).replace(/^ValueError: /, "");
    }
  };

  // the current curves: {key: [value per x grid point]}, from the grid or from Python
  Chart.prototype.curves = function () {
    if (this.custom) { return this.custom.curve; }
    var offSlider = this.off.slice(0, -1).some(function (v) { return v !== null; });
    var n = this.spec.x.values.length, base = 0, self = this, out = {};
    this.spec.sliders.forEach(function (c, j) { base = base * c.values.length + self.index[j]; });
    this.keys.forEach(function (key) {
      out[key] = offSlider ? self.spec.x.values.map(function () { return null; }) : self.spec.data[key].slice(base * n, base * n + n);
    });
    return out;
  };

  Chart.prototype.timedDraw = function (event) {
    var fig = this.fig, t0 = event && event.timeStamp ? event.timeStamp : performance.now();
    this.draw();
    requestAnimationFrame(function () {
      fig.dataset.redrawMs = (performance.now() - t0).toFixed(1);
      fig.dataset.redraws = String(Number(fig.dataset.redraws || 0) + 1);
    });
  };

  function ticks(lo, hi, log) {
    if (log) {
      var out = [], e0 = Math.floor(Math.log10(lo)), e1 = Math.ceil(Math.log10(hi));
      for (var e = e0; e <= e1; e++) { out.push(Math.pow(10, e)); }
      return out;
    }
    var span = hi - lo, raw = span / 5, mag = Math.pow(10, Math.floor(Math.log10(raw))), step = mag;
    [1, 2, 2.5, 5, 10].some(function (f) { step = f * mag; return span / step <= 6; });
    var list = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) { list.push(Math.abs(t) < step * 1e-9 ? 0 : t); }
    return list;
  }

  Chart.prototype.draw = function () {
    var spec = this.spec, scale = spec.scale, xs = spec.x.values, curves = this.curves();
    var last = this.controls.length - 1, xOff = this.off[last];
    var xSel = this.value(last);
    var point = {};
    var self = this;
    this.keys.forEach(function (key) {
      point[key] = xOff !== null ? (self.custom ? self.custom.point[key] : null) : curves[key][self.index[last]];
    });
    var W = Math.max(280, Math.min(760, Math.round(this.plot.clientWidth || 640))), H = HEIGHT;
    var ys = [];
    this.keys.forEach(function (key) { curves[key].concat([point[key]]).forEach(function (v) { if (v !== null && (!spec.log_y || v > 0)) { ys.push(v / scale); } }); });
    var yLo = ys.length ? Math.min.apply(null, ys) : 0, yHi = ys.length ? Math.max.apply(null, ys) : 1;
    if (spec.log_y) { yLo = Math.pow(10, Math.floor(Math.log10(yLo))); yHi = Math.pow(10, Math.ceil(Math.log10(yHi))); }
    else { if (spec.y_zero) { yLo = Math.min(0, yLo); } if (yHi === yLo) { yHi = yLo + 1; } yHi = yLo + (yHi - yLo) * 1.06; }
    var xv = spec.x.values.concat(xOff !== null ? [xOff] : []);
    var xLo = Math.min.apply(null, xv), xHi = Math.max.apply(null, xv);
    if (xHi === xLo) { xHi = xLo + 1; }
    var fx = spec.log_x ? function (v) { return Math.log(v); } : function (v) { return v; };
    var fy = spec.log_y ? function (v) { return Math.log(v); } : function (v) { return v; };
    var X = function (v) { return LEFT + (W - LEFT - RIGHT) * (fx(v) - fx(xLo)) / (fx(xHi) - fx(xLo)); };
    var Y = function (v) { return TOP + (H - TOP - BOTTOM) * (1 - (fy(v) - fy(yLo)) / (fy(yHi) - fy(yLo))); };
    var svg = el("svg:svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, "class": "shardbook-chart-svg", "aria-hidden": "true" });
    // axes and ticks
    ticks(yLo, yHi, spec.log_y).forEach(function (t) {
      if (t < yLo - 1e-12 || t > yHi * (1 + 1e-9)) { return; }
      svg.appendChild(el("svg:line", { x1: LEFT, x2: W - RIGHT, y1: Y(t), y2: Y(t), "class": "grid" }));
      svg.appendChild(el("svg:text", { x: LEFT - 6, y: Y(t) + 4, "text-anchor": "end" }, short(t)));
    });
    var xt = spec.log_x ? xs : ticks(xLo, xHi, false), every = Math.max(1, Math.ceil(xt.length / Math.floor((W - LEFT - RIGHT) / 44)));
    xt.forEach(function (t, i) {
      if (i % every) { return; }
      svg.appendChild(el("svg:text", { x: X(t), y: H - BOTTOM + 16, "text-anchor": "middle" }, short(t)));
    });
    svg.appendChild(el("svg:line", { x1: LEFT, x2: W - RIGHT, y1: H - BOTTOM, y2: H - BOTTOM, "class": "axis" }));
    svg.appendChild(el("svg:line", { x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM, "class": "axis" }));
    svg.appendChild(el("svg:text", { x: (LEFT + W - RIGHT) / 2, y: H - 6, "text-anchor": "middle" }, spec.x_label));
    svg.appendChild(el("svg:text", { x: 12, y: (TOP + H - BOTTOM) / 2, "text-anchor": "middle", transform: "rotate(-90 12 " + (TOP + H - BOTTOM) / 2 + ")" }, spec.y_label));
    // the selected x
    svg.appendChild(el("svg:line", { x1: X(xSel), x2: X(xSel), y1: TOP, y2: H - BOTTOM, "class": "marker" }));
    // the curves, broken where the cost model refuses a point
    spec.series.forEach(function (s) {
      var d = "", pen = false;
      curves[s.key].forEach(function (v, i) {
        if (v === null || (spec.log_y && v <= 0)) { pen = false; return; }
        d += (pen ? "L" : "M") + X(xs[i]).toFixed(1) + " " + Y(v / scale).toFixed(1);
        pen = true;
      });
      if (d) { svg.appendChild(el("svg:path", { d: d, fill: "none", stroke: s.color, "stroke-width": 2.2, "stroke-dasharray": s.dash ? "6 4" : "none" })); }
      var v = point[s.key];
      if (v !== null && v !== undefined && (!spec.log_y || v > 0)) {
        svg.appendChild(el("svg:circle", { cx: X(xSel), cy: Y(v / scale), r: 4, fill: s.color }));
      }
    });
    this.plot.replaceChildren(svg);
    // the legend and the values at the selected x, as text
    this.readout.replaceChildren();
    this.readout.appendChild(el("span", { "class": "shardbook-chart-at" }, (spec.x.spec.label || spec.x.name) + " = " + valueText(xSel) + ":"));
    spec.series.forEach(function (s) {
      var v = point[s.key];
      var item = el("span", { "class": "shardbook-chart-value", "data-series": s.key });
      item.appendChild(el("span", { "class": "shardbook-chart-swatch" + (s.dash ? " dashed" : ""), style: "border-color: " + s.color }));
      item.appendChild(document.createTextNode(s.label + " "));
      item.appendChild(el("b", {}, v === null || v === undefined ? "—" : fixed(v / scale, spec.digits) + (spec.unit ? " " + spec.unit : "")));
      self.readout.appendChild(item);
    });
  };

  // A chart is built when it comes near the screen, never while the page
  // loads nor in its first idle moments (Lighthouse counts those as blocked
  // time on a phone: 0.55-0.6 s on chapters 3 and 4): building reads the
  // plot's width, which at load forces the whole page's first style and
  // layout into this script (on a phone, most of a second of blocked main
  // thread in Lighthouse). Its box keeps its size meanwhile (the CSS
  // reserves it), so nothing moves when it is drawn. Printing, from the
  // browser (beforeprint) or the PDF step (shardbookCharts.buildAll), builds
  // every chart first.
  function build(fig) {
    if (fig.shardbookChart || fig.dataset.state === "failed") { return; }
    try { fig.shardbookChart = new Chart(fig); } catch (err) { fig.dataset.state = "failed"; throw err; }
  }
  function figures() { return [].slice.call(document.querySelectorAll("figure.shardbook-chart")); }
  function buildAll() { figures().forEach(build); return figures().every(function (f) { return f.dataset.state === "ready"; }); }
  window.shardbookCharts = { buildAll: buildAll };
  window.addEventListener("beforeprint", buildAll);
  function init() {
    var figs = figures();
    if (!figs.length) { return; }
    if ("IntersectionObserver" in window) {
      var near = new IntersectionObserver(function (entries) {
        entries.forEach(function (entry) {
          if (entry.isIntersecting) { near.unobserve(entry.target); build(entry.target); }
        });
      }, { rootMargin: "600px 0px" });
      figs.forEach(function (fig) { near.observe(fig); });
      return;
    }
    // a browser without IntersectionObserver: each chart its own idle moment
    var idle = window.requestIdleCallback || function (fn) { return setTimeout(fn, 200); };
    (function next(i) {
      if (i >= figs.length) { return; }
      idle(function () { build(figs[i]); next(i + 1); }, { timeout: 3000 });
    })(0);
  }
  if (document.readyState === "complete") { init(); } else { window.addEventListener("load", init); }
})();
