// @ts-check
// Mode check: only look whether the lock (or one of the locks) is held, and say who holds it.
"use strict";

const awsflock = require("./awsflock");
const format = require("./format");
const report = require("./report");
const runner = require("./runner");

/** Looks at the locks; the step's exit status (1 while one is held, with fail-if-held).
 * @param {import("./inputs").Inputs} inputs
 * @param {string} bin
 * @param {Record<string, string>} env */
async function check(inputs, bin, env) {
  /** @type {{name: string, data: import("./output").Status | undefined} | null} */
  let look = null;
  let held = false;
  for (const name of inputs.names) {
    const { data, error, code } = await awsflock.status(bin, name, env);
    if (error) throw new Error(`could not tell whether '${name}' is held: ${error}`);
    if (code === 0) {
      look = { name, data };
      held = true;
      break;
    }
    look = look || { name, data };
  }
  if (look === null) throw new Error("no lock to look at");
  runner.setOutput("acquired", "false");
  runner.setOutput("held", String(held));
  runner.setOutput("holder", format.holderJson(look.data));
  const { said, summary } = report.checked(inputs.names, look, held);
  runner.summary(summary);
  if (held && inputs.failIfHeld) {
    runner.error(`${said} (mode: check fails while it is held)`);
    return 1;
  }
  runner.info(said);
  return 0;
}

module.exports = { check };
