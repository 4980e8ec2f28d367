// @ts-check
// The action's post step (always run, also on failure and cancellation): give back the lease
// `main` saved, by its LEASE_ID, which also stops the keep-alive renewer. A job that never got
// the lock saved none and releases nothing; a second run releases nothing more.
"use strict";

const awsflock = require("./awsflock");
const runner = require("./runner");

/** Gives the lease back; the step's exit status. */
async function post() {
  const name = runner.state("name"); // as the log lines say them: 'a', or 'a', 'b'
  /** @type {string[]} */
  const names = JSON.parse(runner.state("names") || "[]");
  const lease = runner.state("lease-id");
  if (!lease) {
    if (name) runner.info(`this job never held ${name}: nothing to release`);
    return 0;
  }
  runner.mask(lease);
  const bin = runner.state("bin") || "awsflock";
  const env = JSON.parse(runner.state("env") || "{}");
  // Ignored here: the runner cancelling a slow post must not stop the release half way.
  process.on("SIGINT", () => {});
  const done = await awsflock.run(bin, ["release", "--", ...names, lease], env);
  const said = done.events.map((e) => e.message).filter(Boolean);
  if (done.code === 0) {
    // Since when: a post run again later released nothing more, and must not say it held.
    const since = Number(runner.state("acquired-at"));
    const held = since ? ` (granted to this job at ${new Date(since).toISOString()})` : "";
    runner.info(`released ${name}${held}`);
    return 0;
  }
  if (done.code === 3) {
    // Force-released by an operator, or expired and taken while the job ran: what it did
    // under the lock may not have been protected all along. That fails the job.
    runner.error(`the lock ${name} was lost while this job ran: ${said.join(" ") || "not held"}`);
    return 1;
  }
  runner.warning(
    `could not release ${name} (${said.join(" ") || `awsflock exited ${done.code}`}): ` +
      "it is freed when its lease runs out, at most the action's lease plus the skew window after " +
      "the job ends",
  );
  return 0;
}

post().then(
  // exitCode, not exit(): output still queued for a pipe (macOS) is written first.
  (code) => (process.exitCode = code),
  (err) => {
    runner.error(`awsflock action (post): ${err.message}`);
    process.exitCode = 1;
  },
);
