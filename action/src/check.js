// @ts-check
// Mode check: only look whether the lock is held, and say who holds it.
"use strict";

const awsflock = require("./awsflock");
const format = require("./format");
const report = require("./report");
const runner = require("./runner");

/** Looks at the lock; the step's exit status (1 while it is held, with fail-if-held).
 * @param {import("./inputs").Inputs} inputs
 * @param {string} bin
 * @param {Record<string, string>} env */
async function check(inputs, bin, env) {
  const { data, error, code } = await awsflock.status(bin, inputs.name, env);
  if (error) throw new Error(`could not tell whether ${inputs.name} is held: ${error}`);
  const held = code === 0;
  runner.setOutput("acquired", "false");
  runner.setOutput("held", String(held));
  runner.setOutput("holder", format.holderJson(data));
  const { said, summary } = report.checked(inputs.name, data, held);
  runner.summary(summary);
  if (held && inputs.failIfHeld) {
    runner.error(`lock '${inputs.name}' is ${said} (mode: check fails while it is held)`);
    return 1;
  }
  runner.info(`lock '${inputs.name}' is ${said}`);
  return 0;
}

module.exports = { check };
