/* The book's search ranking and snippets (Sphinx's html_search_scorer: this
   file is appended to language_data.js, which the search page loads after
   searchtools.js).

   Ranking: a reader who types "FSDP" is looking for the chapter, not for
   Candidate.fsdp. Sphinx scores an API object's name above a word in a
   chapter's title; here the prose comes first: a chapter or section title
   that holds the whole query, then the numbered chapters, then the
   glossary's definition, the other appendices, and the package reference's
   objects last. A whole word of the
   query scores above a word that merely contains it ("all" in
   "parallelism").

   Snippets: KaTeX writes each formula three times (MathML, its TeX source,
   the HTML a reader sees); a snippet keeps only what the reader sees. */
var Scorer = {
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: { 0: 15, 1: 5, 2: -5 },
  objPrioDefault: 0,
  title: 15,
  partialTitle: 3, // Sphinx: 7, above a whole word in the text (5)
  term: 5,
  partialTerm: 1,
  score: function (result) {
    var docname = result[0], title = String(result[1] || ""), descr = result[3], score = result[4];
    var query = "";
    try { query = (new URLSearchParams(window.location.search).get("q") || "").trim().toLowerCase(); } catch (e) { query = ""; }
    if (descr) { return score - 40; } // an API object (its description names its kind): after every page
    // a glossary term that is the query (Sphinx scores an index entry up to
    // 100): after the chapters that use it, before the other appendices
    if (/^#term-/.test(String(result[2] || ""))) { return 10.5; }
    if (query && title.toLowerCase().indexOf(query) >= 0) { score += 20; }
    var chapter = /^chapters\/0(\d)_/.exec(docname);
    // numbered chapters first; among equals, the earlier one, which introduces the idea
    if (chapter) { score += 6 + (9 - Number(chapter[1])) / 10; }
    // the planner page with the chapters (it is where a reader acts on them)
    else if (/99_planner$/.test(docname)) { score += 5; }
    // the errata log quotes every page and names ledger keys: last of the pages
    else if (/98_errata$/.test(docname)) { score -= 12; }
    else if (/_reference$/.test(docname)) { score -= 6; }
    return score;
  },
};

(function () {
  if (typeof Search === "undefined" || !Search.htmlToText) { return; }
  var original = Search.htmlToText;
  Search.htmlToText = function (htmlString, anchor) {
    var doc = new DOMParser().parseFromString(htmlString, "text/html");
    // the hidden copies of each formula; the page's title and its contents
    // lists (a snippet from them only repeats the result's title); a cell's
    // printed output (a command's table, rules of dashes), which is no prose
    doc.querySelectorAll(".katex-mathml, annotation, [role='main'] h1, .toctree-wrapper, nav, .shardbook-live, .cell_output pre")
      .forEach(function (el) { el.remove(); });
    // a space between a formula and the words around it, as a reader sees them
    doc.querySelectorAll(".katex").forEach(function (el) { el.textContent = " " + el.textContent.replace(/\s+/g, "") + " "; });
    return original(doc.documentElement.outerHTML, anchor).replace(/\s+/g, " ");
  };
})();

// A hyphenated query ("all-gather") is looked up whole when the index holds
// it whole (shardbook.book.search indexes such terms), else word by word.
var splitQuery = function (query) {
  var words = query.split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}-]+/gu).filter(function (t) { return t; });
  var out = [];
  words.forEach(function (w) {
    var parts = w.split("-").filter(function (t) { return t; });
    if (parts.length > 1 && typeof Search !== "undefined" && Search._index && typeof Stemmer !== "undefined") {
      var stem = new Stemmer().stemWord(parts.join("-").toLowerCase());
      if (Search._index.terms[stem] !== undefined || Search._index.titleterms[stem] !== undefined) { out.push(parts.join("-")); return; }
    }
    out.push.apply(out, parts);
  });
  return out;
};
