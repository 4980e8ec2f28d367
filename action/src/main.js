// @ts-check
// The action's main step: take the lock for the rest of the job (mode lock, lock.js), or only
// look (mode check, check.js). What `post` needs to give the lease back goes into its state.
"use strict";

const awsflock = require("./awsflock");
const { check } = require("./check");
const { readInputs } = require("./inputs");
const { lock } = require("./lock");
const runner = require("./runner");

async function main() {
  const inputs = readInputs();
  const bin = awsflock.ensure(inputs);
  const env = awsflock.storeEnv(inputs);
  runner.saveState("name", inputs.name);
  runner.saveState("names", JSON.stringify(inputs.names));
  runner.saveState("bin", bin);
  runner.saveState("env", JSON.stringify(env));
  return inputs.mode === "check" ? check(inputs, bin, env) : lock(inputs, bin, env);
}

main().then(
  // exitCode, not exit(): output still queued for a pipe (macOS) is written first.
  (code) => (process.exitCode = code),
  (err) => {
    runner.error(err instanceof runner.UsageError ? err.message : `awsflock action: ${err.message}`);
    process.exitCode = 1;
  },
);
