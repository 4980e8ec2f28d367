// @ts-check
// Mode lock: take the lock for the rest of the job, with awsflock's keep-alive renewer
// following the runner's worker process, which lives as long as the job. While the job waits,
// it says how the wait stands; a cancel from the runner ends the wait. The LEASE_ID goes into
// the action's state only, for `post`.
"use strict";

const awsflock = require("./awsflock");
const format = require("./format");
const { acquireArgs } = require("./inputs");
const output = require("./output");
const report = require("./report");
const runner = require("./runner");

/** @typedef {import("node:child_process").ChildProcess} ChildProcess */
/** @typedef {import("./inputs").Inputs} Inputs */
/** @typedef {import("./output").AwsflockEvent} AwsflockEvent */
/** @typedef {import("./output").Done} Done */
/** @typedef {import("./output").Lease} Lease */
/** @typedef {import("./output").Status} Status */

/** How often a waiting job says how its wait stands (one `status` read each time). */
const PROGRESS_MS = 5000;

/** The runner's cancel (SIGINT, then SIGTERM): either ends the wait (awsflock leaves the line
 * and takes nothing); a lease granted just before is saved for `post`. */
class Cancel {
  constructor() {
    /** The first signal received ("" if none). */
    this.signal = "";
    /** @type {ChildProcess | null} awsflock, once started */
    this.child = null;
    process.on("SIGINT", () => this.receive("SIGINT"));
    process.on("SIGTERM", () => this.receive("SIGTERM"));
  }

  /** @param {string} signal */
  receive(signal) {
    this.signal = this.signal || signal;
    if (this.child && this.child.exitCode === null) this.child.kill("SIGINT");
  }
}

/** What the job says while awsflock waits: the wait's start, then every PROGRESS_MS how it
 * stands. Keeps who held the lock when the wait began, and the warnings to say at the end. */
class Watch {
  /** @param {string[]} names @param {string} bin @param {Record<string, string>} env */
  constructor(names, bin, env) {
    this.names = names;
    this.bin = bin;
    this.env = env;
    this.began = Date.now();
    /** @type {ChildProcess | null} awsflock, once started */
    this.child = null;
    /** @type {Status | null} status when the wait began */
    this.holder = null;
    /** @type {AwsflockEvent[]} said once awsflock is done */
    this.warnings = [];
    this.polling = false;
    /** @type {NodeJS.Timeout | null} */
    this.ticker = null;
  }

  /** @param {AwsflockEvent} event */
  onEvent(event) {
    if (event.event === "contended" && this.ticker === null) {
      runner.info(event.message);
      this.progress();
      this.ticker = setInterval(() => this.progress(), PROGRESS_MS);
    } else if (event.level === "warning" && event.event !== "busy") {
      // Said once awsflock is done and a lease it printed is masked: a warning may name it.
      this.warnings.push(event);
    }
  }

  /** A `status` read of each lock until one is held, said as a line (none once awsflock
   * has ended, or while one is out). */
  async progress() {
    const child = this.child;
    if (this.polling || !child || child.exitCode !== null) return;
    this.polling = true;
    try {
      const look = await firstHeld(this.bin, this.names, this.env);
      if (!look || child.exitCode !== null) return;
      if (this.holder === null) this.holder = look.data;
      // Its place names the process the lease is kept for (the worker, --while-pid).
      const pids = [process.ppid, child.pid].filter((pid) => pid !== undefined);
      runner.info(report.waiting(this.names, look, (Date.now() - this.began) / 1000, pids));
    } finally {
      this.polling = false;
    }
  }

  stop() {
    if (this.ticker !== null) clearInterval(this.ticker);
  }
}

/** The `status --json` of the first of `names` that is not free (read in turn), else of the
 * first; null if none could be read.
 * @param {string} bin
 * @param {string[]} names
 * @param {Record<string, string>} env
 * @returns {Promise<{name: string, data: Status} | null>} */
async function firstHeld(bin, names, env) {
  /** @type {{name: string, data: Status} | null} */
  let first = null;
  for (const name of names) {
    const { data } = await awsflock.status(bin, name, env);
    if (!data) continue;
    if (data.state !== "free") return { name, data };
    first = first || { name, data };
  }
  return first;
}

/** Takes the lock; the step's exit status.
 * @param {Inputs} inputs
 * @param {string} bin
 * @param {Record<string, string>} env */
async function lock(inputs, bin, env) {
  const cancel = new Cancel();
  const watch = new Watch(inputs.names, bin, env);
  const done = await awsflock.run(bin, acquireArgs(inputs, process.ppid), env, {
    onEvent: (event) => watch.onEvent(event),
    started: (child) => (cancel.child = watch.child = child),
  });
  watch.stop();
  const waitedS = (Date.now() - watch.began) / 1000;
  runner.setOutput("waited-seconds", waitedS.toFixed(1));
  runner.setOutput("holder", format.holderJson(watch.holder));
  // A lease printed is ours whatever the exit status: a cancel that lands just after the
  // grant makes acquire exit 130 with the lease printed and kept alive.
  const lease = output.leaseIn(done.stdout);
  if (lease) keep(lease);
  for (const event of watch.warnings) {
    // A cancel's "interrupted ..." is what was asked for: no annotation.
    (cancel.signal ? runner.info : runner.warning)(event.message);
  }
  const failed = report.failure(inputs.names, { lease, cancelled: cancel.signal, done, waitedS });
  if (failed || !lease) {
    runner.setOutput("acquired", "false");
    if (failed) (failed.level === "info" ? runner.info : runner.error)(failed.text);
    return 1;
  }
  held(inputs, lease, done, { waitedS, holder: watch.holder });
  return 0;
}

/** Saves the lease for `post` first: whatever happens next, `post` gives it back.
 * @param {Lease} lease */
function keep(lease) {
  runner.saveState("lease-id", lease.lease_id);
  runner.saveState("acquired-at", String(Date.now()));
  runner.mask(lease.lease_id);
}

/** The outputs, variables, log line and summary of a job that holds the locks: as `awsflock
 * run` gives CMD, each lock's name and token by its place (AWSFLOCK_LOCK_ID_1, ...), and
 * AWSFLOCK_FENCING_TOKEN (and the fencing-token output) for one lock only.
 * @param {Inputs} inputs
 * @param {Lease} lease
 * @param {Done} done
 * @param {{waitedS: number, holder: Status | null}} wait */
function held(inputs, lease, done, { waitedS, holder }) {
  const names = inputs.names;
  const tokens = report.tokensOf(names, lease);
  runner.setOutput("acquired", "true");
  runner.setOutput("fencing-tokens", JSON.stringify(tokens));
  runner.exportVariable("AWSFLOCK_LOCK_ID", names.join("\n"));
  runner.exportVariable("AWSFLOCK_LOCKS", String(names.length));
  names.forEach((name, i) => {
    runner.exportVariable(`AWSFLOCK_LOCK_ID_${i + 1}`, name);
    runner.exportVariable(`AWSFLOCK_FENCING_TOKEN_${i + 1}`, String(tokens[name]));
  });
  if (names.length === 1) {
    runner.setOutput("fencing-token", String(tokens[names[0]]));
    runner.exportVariable("AWSFLOCK_FENCING_TOKEN", String(tokens[names[0]]));
  }
  runner.exportVariable("AWSFLOCK_SHARED", inputs.shared ? "1" : "0");
  if (lease.slot !== undefined && lease.slot !== null) {
    runner.setOutput("slot", String(lease.slot));
    runner.exportVariable("AWSFLOCK_SLOT", String(lease.slot));
  }
  runner.info(report.acquired(names, lease, waitedS, inputs.lease));
  const granted = done.events.find((e) => e.event === "acquired");
  runner.summary(report.heldSummary(names, { lease, waitedS, holder, granted }));
}

module.exports = { lock };
