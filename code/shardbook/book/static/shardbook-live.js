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

  async function prefetch(names, button, box) {
    var base = root() + "_static/pyodide/";
    // sizes written by the build: a compressing host's Content-Length is the
    // compressed size, while the reader counts decompressed bytes
    var sizes = await (await fetch(base + "sizes.json")).json();
    var total = names.reduce(function (a, n) { return a + (sizes[n] || 0); }, 0);
    var loaded = 0;
    for (var i = 0; i < names.length; i++) {
      var response = await fetch(base + names[i]);
      var reader = response.body.getReader();
      for (;;) {
        var chunk = await reader.read();
        if (chunk.done) { break; }
        loaded += chunk.value.length;
        button.textContent = "Loading Python… " + megabytes(loaded) + " of " + megabytes(total) + " MB";
      }
    }
    box.dataset.loadedBytes = String(loaded);
    button.textContent = "Starting Python…";
  }

  async function start(specs, box, button) {
    var t0 = performance.now();
    button.disabled = true;
    button.textContent = "Loading Python…";
    try {
      // fetch the package's sources while Pyodide starts
      var sources = fetch(root() + "_static/shardbook/manifest.json").then(function (r) { return r.json(); }).then(function (names) {
        return Promise.all(names.map(function (name) {
          return fetch(root() + "_static/shardbook/" + name).then(function (r) { return r.text(); }).then(function (text) { return [name, text]; });
        }));
      });
      // fetch Pyodide's large files first, counting bytes for the reader; the
      // loader then finds them in the browser's cache
      await prefetch(["pyodide.asm.wasm", "python_stdlib.zip", "pyodide.asm.mjs"], button, box);
      await loadScript(root() + "_static/pyodide/pyodide.js");
      var py = await loadPyodide({ indexURL: root() + "_static/pyodide/" });
      py.FS.mkdirTree("/home/pyodide/shardbook");
      (await sources).forEach(function (pair) {
        var slash = pair[0].lastIndexOf("/");  // a subpackage's file: make its folder first
        if (slash > 0) { py.FS.mkdirTree("/home/pyodide/shardbook/" + pair[0].slice(0, slash)); }
        py.FS.writeFile("/home/pyodide/shardbook/" + pair[0], pair[1]);
      });
      py.runPython("import sys\nsys.path.insert(0, '/home/pyodide')\nimport json\nfrom shardbook import ledger");
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
        caption.textContent = label;
        var field;
        if (input.kind === "choice") {
          field = document.createElement("select");
          input.options.forEach(function (o) { var opt = document.createElement("option"); opt.value = o; opt.textContent = o; field.appendChild(opt); });
        } else {
          field = document.createElement("input");
          field.type = "text";
          field.inputMode = input.kind === "integer" ? "numeric" : "decimal";
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
    var ms = Math.round(performance.now() - t0);
    box.dataset.readyMs = String(ms);
    box.dataset.state = "ready";
  }

  // Strict parsing: an integer field takes digits only (no 1e3, no 2.7), a
  // number field a plain decimal; nothing is silently rounded or truncated.
  function parseField(input, raw) {
    var text = String(raw).trim();
    if (input.kind === "choice") { return { value: text }; }
    if (input.kind === "integer") {
      if (!/^[+-]?\d+$/.test(text)) { return { error: "must be a whole number (digits only), got \"" + text + "\"" }; }
      return { value: parseInt(text, 10) };
    }
    if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) { return { error: "must be a number, got \"" + text + "\"" }; }
    var value = Number(text);
    if (!isFinite(value)) { return { error: "must be a finite number, got \"" + text + "\"" }; }
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
      var out = JSON.parse(py.runPython("json.dumps(ledger.evaluate_live(" + spec.function + ", json.loads(__live_args)))"));
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
