// The house rule for the action's sources as for the package's: no function over 60 lines and
// no module over 400, counted on TypeScript's syntax tree of each file.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const SRC = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "src");
const MAX_FUNCTION = 60;
const MAX_MODULE = 400;

/** Each function's name and line count in a source file.
 * @param {string} file */
function functionSizes(file) {
  const text = fs.readFileSync(file, "utf8");
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  /** @type {[string, number][]} */
  const sizes = [];
  /** @param {ts.Node} node */
  const visit = (node) => {
    if (ts.isFunctionLike(node) && "body" in node && node.body) {
      const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const last = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      const name = node.name && ts.isIdentifier(node.name) ? node.name.text : "(anonymous)";
      sizes.push([`${path.basename(file)}:${first + 1} ${name}`, last - first + 1]);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return sizes;
}

const files = fs.readdirSync(SRC).filter((f) => f.endsWith(".js")).map((f) => path.join(SRC, f));

test("no function in action/src is over 60 lines", () => {
  const long = files.flatMap(functionSizes).filter(([, lines]) => lines > MAX_FUNCTION);
  assert.deepEqual(long, []);
});

test("no module in action/src is over 400 lines", () => {
  const long = files.filter((f) => fs.readFileSync(f, "utf8").split("\n").length > MAX_MODULE);
  assert.deepEqual(long, []);
});

test("the size count sees every function, arrow functions and methods too", () => {
  const names = functionSizes(path.join(SRC, "lock.js")).map(([where]) => where.split(" ")[1]);
  assert.ok(["lock", "keep", "held", "onEvent", "progress", "(anonymous)"].every((n) => names.includes(n)));
});
