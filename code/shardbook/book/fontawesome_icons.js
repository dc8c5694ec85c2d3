/* The icons this site uses, from Font Awesome Free (icons CC BY 4.0, code MIT; fontawesome.com/license/free),
   written by shardbook.sphinx_ext in place of the theme's full bundle. */
(function () {
  var I = __ICONS__;
  var P = { fab: "fab", "fa-brands": "fab", far: "far", "fa-regular": "far", fas: "fas", "fa-solid": "fas" };
  function swap(root) {
    (root || document).querySelectorAll('i[class*="fa-"],span[class*="fa-"]').forEach(function (el) {
      var cs = [].slice.call(el.classList), pack = "fas", name = null;
      cs.forEach(function (c) {
        if (P[c]) pack = P[c];
        else if (c.indexOf("fa-") === 0 && c !== "fa-lg" && !name) name = c.slice(3);
      });
      var d = I[pack + ":" + name];
      if (!d) return;
      var ns = "http://www.w3.org/2000/svg", svg = document.createElementNS(ns, "svg");
      [].slice.call(el.attributes).forEach(function (a) { svg.setAttribute(a.name, a.value); });
      svg.setAttribute("viewBox", "0 0 " + d[0] + " " + d[1]);
      svg.setAttribute("aria-hidden", "true");
      svg.setAttribute("class", el.getAttribute("class") + " svg-inline--fa");
      var path = document.createElementNS(ns, "path");
      path.setAttribute("fill", "currentColor");
      path.setAttribute("d", d[2]);
      svg.appendChild(path);
      el.parentNode.replaceChild(svg, el);
    });
  }
  function start() {
    var s = document.createElement("style");
    s.textContent = __ICON_CSS__;
    document.head.appendChild(s);
    swap();
    new MutationObserver(function (ms) {
      ms.forEach(function (m) {
        m.addedNodes.forEach(function (n) { if (n.nodeType === 1) swap(n.parentNode || n); });
      });
    }).observe(document.body, { childList: true, subtree: true });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
