/* Live mode: on request, load Pyodide and shardbook's cost-model modules from
   this site, then recompute the page's live values with the chapter's own
   Python function whenever the reader changes an input. Nothing is fetched
   until the button is pressed. */
(function () {
  "use strict";
  function root() { return document.documentElement.dataset.content_root || "./"; }
  function loadScript(src) {
    return new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = src; s.onload = resolve; s.onerror = function () { reject(new Error("could not load " + src)); };
      document.head.appendChild(s);
    });
  }
  function spansOf(name) { return document.querySelectorAll(".glue-key-" + name); }
  function lastLine(err) {
    var lines = String(err && err.message || err).trim().split("\n");
    return lines[lines.length - 1];
  }

  function megabytes(n) { return (n / 1e6).toFixed(1); }

  // Pyodide's two large files (the WebAssembly runtime and the standard
  // library) are fetched once per visit: kept in the browser's Cache Storage
  // under the Pyodide version (a page made live later reads them there, whatever
  // the HTTP cache keeps: a cache too small for a 9.6 MB file, or a host that
  // forbids caching, made the browser download the runtime twice), and handed
  // from memory to Pyodide's loader, which would otherwise fetch them again.
  // (Asking the HTTP cache first, with cache: "only-if-cached", logs an error
  // in the reader's console on every miss.)
  var HELD = ["pyodide.asm.wasm", "python_stdlib.zip"];
  var TYPES = { wasm: "application/wasm", zip: "application/zip", mjs: "text/javascript" };

  async function openCache(version) {
    if (typeof caches === "undefined") { return null; }  // not a secure context (file://)
    try {
      var name = "shardbook-pyodide-" + version;
      (await caches.keys()).forEach(function (k) { if (k.indexOf("shardbook-pyodide-") === 0 && k !== name) { caches.delete(k); } });
      return await caches.open(name);
    } catch (err) { return null; }
  }

  async function prefetch(names, button, box) {
    var base = root() + "_static/pyodide/";
    // sizes written by the build: a compressing host's Content-Length is the
    // compressed size, while the reader counts decompressed bytes
    var sizes = await (await fetch(base + "sizes.json")).json();
    var cache = await openCache(sizes.version || "unversioned");
    var total = names.reduce(function (a, n) { return a + (sizes[n] || 0); }, 0);
    var loaded = 0, fromCache = 0, held = {};
    function show() {
      button.textContent = "Loading Python… " + megabytes(loaded) + " of " + megabytes(total) + " MB" + (fromCache ? " (from this visit's cache)" : "");
    }
    for (var i = 0; i < names.length; i++) {
      var url = new URL(base + names[i], location.href).href;
      var kept = cache && HELD.indexOf(names[i]) >= 0 ? await cache.match(url) : null;
      var bytes;
      if (kept) {
        bytes = new Uint8Array(await kept.arrayBuffer());
        loaded += bytes.length; fromCache += bytes.length; show();
      } else {
        var response = await fetch(url);
        if (!response.ok) { throw new Error("could not load " + names[i] + " (HTTP " + response.status + ")"); }
        var reader = response.body.getReader(), chunks = [], n = 0;
        for (;;) {
          var chunk = await reader.read();
          if (chunk.done) { break; }
          chunks.push(chunk.value); n += chunk.value.length; loaded += chunk.value.length; show();
        }
        bytes = new Uint8Array(n);
        chunks.reduce(function (at, c) { bytes.set(c, at); return at + c.length; }, 0);
        if (cache && HELD.indexOf(names[i]) >= 0) {
          var type = TYPES[names[i].split(".").pop()] || "application/octet-stream";
          try { await cache.put(url, new Response(bytes, { headers: { "Content-Type": type } })); } catch (err) { /* full or refused: this page still has the bytes */ }
        }
      }
      if (HELD.indexOf(names[i]) >= 0) { held[url] = bytes; }
    }
    box.dataset.loadedBytes = String(loaded);
    box.dataset.cachedBytes = String(fromCache);
    button.textContent = "Starting Python…";
    return held;
  }

  // While Pyodide loads, its fetches of the held files are answered from memory.
  async function withHeldFiles(held, load) {
    var original = window.fetch;
    window.fetch = function (resource, options) {
      var url = new URL(typeof resource === "string" || resource instanceof URL ? resource : resource.url, location.href).href;
      if (held[url]) {
        var type = TYPES[url.split(".").pop()] || "application/octet-stream";
        return Promise.resolve(new Response(held[url], { headers: { "Content-Type": type } }));
      }
      return original.apply(this, arguments);
    };
    try { return await load(); } finally { window.fetch = original; }
  }

  // Pyodide with shardbook's browser modules on its path (and `json` and the
  // ledger imported): what a live page and the planner page
  // (shardbook-planner.js, through window.shardbookLive.loadPython) both run.
  // t0: when the reader asked (performance.now()); the box records how long
  // the files and the start of Python took from then
  async function loadPython(button, box, t0) {
    if (t0 === undefined) { t0 = performance.now(); }
    // fetch the package's sources while Pyodide starts, under the version the
    // page names (the page is revalidated on every visit; the files may be kept
    // ten minutes: a rebuild's new code must not meet the old one from a cache)
    var meta = document.querySelector('meta[name="shardbook-live-version"]');
    var versioned = meta ? function (url) { return fetch(url + "?v=" + encodeURIComponent(meta.content)); }
                         : function (url) { return fetch(url, { cache: "no-cache" }); };
    var sources = versioned(root() + "_static/shardbook/manifest.json").then(function (r) { return r.json(); }).then(function (names) {
      return Promise.all(names.map(function (name) {
        return versioned(root() + "_static/shardbook/" + name).then(function (r) { return r.text(); }).then(function (text) { return [name, text]; });
      }));
    });
    // fetch Pyodide's large files first, counting bytes for the reader; the
    // loader then finds them in the browser's cache
    var held = await prefetch(["pyodide.asm.wasm", "python_stdlib.zip", "pyodide.asm.mjs"], button, box);
    box.dataset.fetchedMs = String(Math.round(performance.now() - t0));
    await loadScript(root() + "_static/pyodide/pyodide.js");
    var py = await withHeldFiles(held, function () { return loadPyodide({ indexURL: root() + "_static/pyodide/" }); });
    box.dataset.pythonMs = String(Math.round(performance.now() - t0));
    py.FS.mkdirTree("/home/pyodide/shardbook");
    (await sources).forEach(function (pair) {
      var slash = pair[0].lastIndexOf("/");  // a subpackage's file: make its folder first
      if (slash > 0) { py.FS.mkdirTree("/home/pyodide/shardbook/" + pair[0].slice(0, slash)); }
      py.FS.writeFile("/home/pyodide/shardbook/" + pair[0], pair[1]);
    });
    py.runPython("import sys\nsys.path.insert(0, '/home/pyodide')\nimport json\nfrom shardbook import ledger");
    return py;
  }
  window.shardbookLive = { loadPython: loadPython, lastLine: lastLine };

  async function start(specs, box, button) {
    var t0 = performance.now();
    button.disabled = true;
    button.textContent = "Loading Python…";
    try {
      var py = await loadPython(button, box, t0);
      specs.forEach(function (spec) { py.runPython(spec.source); });
    } catch (err) {
      button.textContent = "Live mode failed: " + lastLine(err);
      return;
    }
    button.remove();
    var original = {};
    var panel = document.createElement("form");
    panel.className = "shardbook-live-panel";
    panel.addEventListener("submit", function (e) { e.preventDefault(); });
    // on a small screen the sticky panel folds to one line while the reader
    // reads (scrolling folds it, unless a field has the focus); the bar opens it
    var toggle = document.createElement("button");
    toggle.type = "button";
    toggle.className = "shardbook-live-toggle";
    function setFolded(folded) {
      panel.classList.toggle("shardbook-live-folded", folded);
      toggle.setAttribute("aria-expanded", String(!folded));
      var n = Number((panel.querySelector(".shardbook-live-changed") || {}).dataset && panel.querySelector(".shardbook-live-changed").dataset.count || 0);
      toggle.textContent = folded ? "Live inputs" + (n ? " · " + n + " changed" : "") + " ▸" : "Hide live inputs ▾";
    }
    toggle.addEventListener("click", function () { setFolded(!panel.classList.contains("shardbook-live-folded")); });
    panel.appendChild(toggle);
    var small = window.matchMedia("(max-width: 767.98px)");
    var lastY = window.scrollY;
    window.addEventListener("scroll", function () {
      var moved = Math.abs(window.scrollY - lastY) > 40;
      if (!moved) { return; }
      lastY = window.scrollY;
      if (small.matches && !panel.contains(document.activeElement) && !panel.classList.contains("shardbook-live-folded")) { setFolded(true); }
    }, { passive: true });
    function markStale() {
      // while any field is refused, the numbers on the page belong to the last good inputs
      var bad = [].some.call(panel.querySelectorAll(".shardbook-live-error"), function (e) { return e.textContent !== ""; });
      specs.forEach(function (spec) {
        spec.values.forEach(function (name) {
          [].forEach.call(spansOf(name), function (s) { s.classList.toggle("live-stale", bad); });
        });
      });
      panel.classList.toggle("shardbook-live-has-error", bad);
    }
    specs.forEach(function (spec, k) {
      spec.args = {};
      spec.values.forEach(function (name) {
        original[name] = [].map.call(spansOf(name), function (s) { return s.textContent; });
      });
      spec.inputs.forEach(function (input) {
        spec.args[input.name] = input.default;
        var label = input.label || input.name;
        var row = document.createElement("label");
        row.className = "shardbook-live-input";
        var caption = document.createElement("span");
        caption.textContent = input.unit ? label + " (" + input.unit + ")" : label;
        var field;
        if (input.kind === "choice") {
          field = document.createElement("select");
          input.options.forEach(function (o) { var opt = document.createElement("option"); opt.value = o; opt.textContent = o; field.appendChild(opt); });
        } else {
          field = document.createElement("input");
          field.type = "text";
          field.inputMode = input.kind === "integer" ? "numeric" : "decimal";
          if (input.minimum !== undefined) { field.title = "Accepts " + domainText(input); }
        }
        field.name = input.name;
        field.value = input.default;
        field.dataset.spec = String(k);
        var error = document.createElement("span");
        error.className = "shardbook-live-error";
        error.setAttribute("role", "status");
        row.appendChild(caption); row.appendChild(field); row.appendChild(error);
        panel.appendChild(row);
        field.addEventListener("change", function () {
          var parsed = parseField(input, field.value);
          if (parsed.error) {
            error.textContent = label + ": " + parsed.error;
            markStale();
            return;
          }
          var next = Object.assign({}, spec.args);
          next[input.name] = parsed.value;
          var message = recompute(py, spec, next);
          if (message === null) {
            spec.args[input.name] = parsed.value;
            error.textContent = "";
          } else {
            error.textContent = label + ": " + field.value + " is not accepted (" + message + ")";
          }
          markStale();
          summarize(panel, specs, original);
        });
      });
    });
    var reset = document.createElement("button");
    reset.type = "button";
    reset.textContent = "Reset to the printed values";
    reset.addEventListener("click", function () {
      specs.forEach(function (spec) {
        spec.inputs.forEach(function (input) {
          panel.querySelector("[name='" + input.name + "']").value = input.default;
          spec.args[input.name] = input.default;
        });
      });
      Object.keys(original).forEach(function (name) {
        [].forEach.call(spansOf(name), function (s, j) { s.textContent = original[name][j]; s.classList.remove("live-changed"); });
      });
      [].forEach.call(panel.querySelectorAll(".shardbook-live-error"), function (e) { e.textContent = ""; });
      markStale();
      summarize(panel, specs, original);
    });
    panel.appendChild(reset);
    var changed = document.createElement("div");
    changed.className = "shardbook-live-changed";
    changed.setAttribute("aria-label", "Values that changed");
    changed.hidden = true;
    panel.appendChild(changed);
    var note = document.createElement("p");
    note.className = "shardbook-live-note";
    var n = specs.reduce(function (a, spec) { return a + spec.values.length; }, 0);
    note.textContent = "Live: " + n + " numbers on this page recompute with the book's own Python (highlighted when they change). " +
      "Everything else, compiled HLO, local shapes from a real compile, and measured data, stays as printed.";
    panel.appendChild(note);
    box.appendChild(panel);
    setFolded(false);
    var ms = Math.round(performance.now() - t0);
    box.dataset.readyMs = String(ms);
    box.dataset.state = "ready";
  }

  // Strict parsing against the input's declared domain (ledger.number_input):
  // an integer field takes digits only (no 1e3, no 2.7) and nothing beyond
  // 2**53 (a browser's number would round it), a number field a plain
  // decimal; a value outside [minimum, maximum] is refused, never clamped.
  var MAX_EXACT = BigInt(2) ** BigInt(53);
  function grouped(n) { return Number(n).toLocaleString("en-US", { maximumFractionDigits: 12 }); }
  function domainText(input) {
    return (input.kind === "integer" ? "a whole number" : "a number") + " from " + grouped(input.minimum) + " to " +
      grouped(input.maximum) + (input.unit ? " " + input.unit : "");
  }
  function parseField(input, raw) {
    var text = String(raw).trim();
    if (input.kind === "choice") {
      if (input.options.indexOf(text) < 0) { return { error: "must be one of the listed options, got \"" + text + "\"" }; }
      return { value: text };
    }
    var value;
    if (input.kind === "integer") {
      if (!/^[+-]?\d+$/.test(text)) { return { error: "must be a whole number (digits only), got \"" + text + "\"" }; }
      var big = BigInt(text);
      if (big > MAX_EXACT || big < -MAX_EXACT) { return { error: "must be " + domainText(input) + ", got " + text + " (beyond 2**53, which a browser cannot hold exactly)" }; }
      value = Number(big);
    } else {
      if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) { return { error: "must be a number, got \"" + text + "\"" }; }
      value = Number(text);
      if (!isFinite(value)) { return { error: "must be a finite number, got \"" + text + "\"" }; }
    }
    if (input.minimum !== undefined && input.minimum !== null && (value < input.minimum || value > input.maximum)) {
      return { error: "must be " + domainText(input) + ", got " + text };
    }
    return { value: value };
  }

  // The panel stays in view and lists the values that now differ from the
  // printed page, each a link to where it appears.
  function summarize(panel, specs, original) {
    var list = panel.querySelector(".shardbook-live-changed");
    list.textContent = "";
    var n = 0;
    specs.forEach(function (spec) {
      spec.values.forEach(function (name) {
        [].forEach.call(spansOf(name), function (s, j) {
          if (s.textContent === original[name][j]) { return; }
          if (!s.id) { s.id = "live-" + name + "-" + j; }
          var a = document.createElement("a");
          a.href = "#" + s.id;
          a.textContent = s.textContent;
          a.title = name;
          list.appendChild(a);
          n += 1;
        });
      });
    });
    list.hidden = n === 0;
    list.dataset.count = String(n);
  }

  // Recompute one declaration's values; null on success, else the cost
  // model's own message (the page keeps its last good numbers).
  function recompute(py, spec, args) {
    try {
      py.globals.set("__live_args", JSON.stringify(args));
      py.globals.set("__live_inputs", JSON.stringify(spec.inputs));
      var out = JSON.parse(py.runPython("json.dumps(ledger.evaluate_live(" + spec.function + ", json.loads(__live_args), json.loads(__live_inputs)))"));
      Object.keys(out).forEach(function (name) {
        [].forEach.call(spansOf(name), function (s) {
          if (s.textContent !== out[name]) { s.textContent = out[name]; s.classList.add("live-changed"); }
        });
      });
      return null;
    } catch (err) {
      return lastLine(err).replace(/^ValueError: /, "");
    }
  }

  function init() {
    var blocks = document.querySelectorAll("script.shardbook-live");
    if (!blocks.length) { return; }
    var specs = [].map.call(blocks, function (b) { return JSON.parse(b.textContent); });
    // the build puts the box and a disabled button under the title (so
    // nothing moves when this script runs); older pages get them here
    var box = document.querySelector("div.shardbook-live");
    if (!box) {
      var h1 = document.querySelector("article.bd-article h1") || document.querySelector("article h1") || document.querySelector("main h1");
      if (!h1) { return; }
      box = document.createElement("div");
      box.className = "shardbook-live";
      box.innerHTML = '<button type="button" class="shardbook-live-start">Make this page live</button>';
      h1.parentNode.insertBefore(box, h1.nextSibling);
    }
    var button = box.querySelector("button.shardbook-live-start");
    button.title = "Load Python in your browser and recompute this page's numbers for other inputs";
    button.disabled = false;
    button.addEventListener("click", function () { start(specs, box, button); }, { once: true });
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); } else { init(); }
})();
