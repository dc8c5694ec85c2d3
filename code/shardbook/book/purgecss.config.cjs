// PurgeCSS settings for the built site's stylesheets (run by shardbook.sphinx_ext).
// The theme sets data-theme and data-mode from JavaScript (dataset.theme), so
// those attribute names never appear in a page or a script: keep their rules.
module.exports = {
  safelist: { greedy: [/data-theme/, /data-mode/] },
};
