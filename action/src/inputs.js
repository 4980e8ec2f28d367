// @ts-check
// The action's inputs (action.yml), checked, and the `awsflock acquire` command they make.
"use strict";

const runner = require("./runner");

/**
 * The inputs, with action.yml's defaults. `names`: the locks taken (the name, or the names
 * input's, one per line); `name`: them as the log lines say them ('a', or 'a', 'b').
 * @typedef {object} Inputs
 * @property {string} name
 * @property {string[]} names
 * @property {string} mode
 * @property {boolean} failIfHeld
 * @property {string} store
 * @property {string} table
 * @property {string} region
 * @property {string} lease
 * @property {string} wait
 * @property {boolean} fair
 * @property {boolean} shared
 * @property {string} slots
 * @property {string} owner
 * @property {string} version
 */

/** The inputs the runner passed; a UsageError names the first one that is wrong.
 * @returns {Inputs} */
function readInputs() {
  const names = namesOf(runner.input("name"), runner.input("names"));
  const inputs = {
    name: names.map((n) => `'${n}'`).join(", "),
    names,
    mode: runner.input("mode") || "lock",
    failIfHeld: runner.input("fail-if-held") === "" ? true : runner.flag("fail-if-held"),
    store: runner.input("store"),
    table: runner.input("table"),
    region: runner.input("region"),
    lease: runner.input("lease") || "60s",
    wait: runner.input("wait") || "30m",
    fair: runner.input("fair") === "" ? true : runner.flag("fair"),
    shared: runner.input("shared") === "" ? false : runner.flag("shared"),
    slots: runner.input("slots"),
    owner: runner.input("owner"),
    version: runner.input("version"),
  };
  if (!["lock", "check"].includes(inputs.mode)) {
    throw new runner.UsageError(`input mode must be lock or check, not "${inputs.mode}"`);
  }
  if (inputs.slots && !/^[1-9][0-9]*$/.test(inputs.slots)) {
    throw new runner.UsageError(`input slots must be a whole number of slots, not "${inputs.slots}"`);
  }
  if (inputs.shared && inputs.slots) {
    throw new runner.UsageError("input shared takes a plain lock: drop slots, or shared");
  }
  if (names.length > 1 && (inputs.slots || inputs.shared)) {
    const which = inputs.slots ? "slots" : "shared";
    throw new runner.UsageError(`input ${which} takes one lock: give name, or drop ${which}`);
  }
  return inputs;
}

/** The locks to take: the name input, or the names input's lines (each trimmed, blank ones
 * left out); a UsageError if neither or both are given.
 * @param {string} name
 * @param {string} names */
function namesOf(name, names) {
  const several = names.split(/\r?\n/).map((n) => n.trim()).filter(Boolean);
  if (name && several.length) {
    throw new runner.UsageError("give input name (one lock) or names (several), not both");
  }
  if (name) return [name];
  if (!several.length) {
    throw new runner.UsageError("input name is required: the lock's name (or names: several, one per line)");
  }
  return several;
}

/** Who holds the lock, as waiting jobs see it: the run's URL is added by awsflock itself.
 * @param {NodeJS.ProcessEnv} [e] the runner's environment */
function defaultOwner(e = process.env) {
  const where = [e.GITHUB_REPOSITORY, e.GITHUB_WORKFLOW].filter(Boolean).join(": ");
  const job = e.GITHUB_JOB ? ` / ${e.GITHUB_JOB}` : "";
  const who = [e.GITHUB_ACTOR, e.GITHUB_REF_NAME].filter(Boolean).join(", ");
  const owner = (where || "github-actions") + job + (who ? ` (${who})` : "");
  return owner.slice(0, 200);
}

/** The arguments of `awsflock acquire` for the inputs: its keep-alive renewer follows the
 * process `whilePid` (the runner's worker, which lives as long as the job).
 * @param {Inputs} inputs
 * @param {number} whilePid
 * @param {NodeJS.ProcessEnv} [env] the runner's environment, for the default owner */
function acquireArgs(inputs, whilePid, env = process.env) {
  const args = ["acquire", "--json", "--while-pid", String(whilePid)];
  args.push("--lease-duration", inputs.lease, "--wait-time", inputs.wait);
  args.push("--owner", inputs.owner || defaultOwner(env));
  // Shared jobs are served as they come (a waiting job that takes the lock alone keeps new
  // shared ones out), so fair applies only to the jobs that take it alone; and jobs that take
  // several names are served as they come too (each name's line would make them wait in
  // several lines at once).
  if (inputs.shared) args.push("--shared");
  else if (inputs.fair && inputs.names.length === 1) args.push("--fair");
  if (inputs.slots) args.push("--slots", inputs.slots);
  args.push("--", ...inputs.names); // a name may start with "-"
  return args;
}

module.exports = { acquireArgs, defaultOwner, readInputs };
