// The action's main step: take the lock for the rest of the job (or, with mode check, only
// look), with awsflock's keep-alive renewer following the runner's worker process, which
// lives as long as the job. The LEASE_ID goes into the action's state only, for `post`.
"use strict";

const awsflock = require("./awsflock");
const format = require("./format");
const runner = require("./runner");

/** How often a waiting job says how its wait stands (one `status` read each time). */
const PROGRESS_MS = 5000;

function readInputs() {
  const inputs = {
    name: runner.input("name"),
    mode: runner.input("mode") || "lock",
    failIfHeld: runner.input("fail-if-held") === "" ? true : runner.flag("fail-if-held"),
    store: runner.input("store"),
    table: runner.input("table"),
    region: runner.input("region"),
    lease: runner.input("lease") || "60s",
    wait: runner.input("wait") || "30m",
    fair: runner.input("fair") === "" ? true : runner.flag("fair"),
    slots: runner.input("slots"),
    owner: runner.input("owner"),
    version: runner.input("version"),
  };
  if (!inputs.name) throw new runner.UsageError("input name is required: the lock's name");
  if (!["lock", "check"].includes(inputs.mode)) {
    throw new runner.UsageError(`input mode must be lock or check, not "${inputs.mode}"`);
  }
  if (inputs.slots && !/^[1-9][0-9]*$/.test(inputs.slots)) {
    throw new runner.UsageError(`input slots must be a whole number of slots, not "${inputs.slots}"`);
  }
  return inputs;
}

/** Who holds the lock, as waiting jobs see it: the run's URL is added by awsflock itself. */
function defaultOwner() {
  const e = process.env;
  const where = [e.GITHUB_REPOSITORY, e.GITHUB_WORKFLOW].filter(Boolean).join(": ");
  const job = e.GITHUB_JOB ? ` / ${e.GITHUB_JOB}` : "";
  const who = [e.GITHUB_ACTOR, e.GITHUB_REF_NAME].filter(Boolean).join(", ");
  const owner = (where || "github-actions") + job + (who ? ` (${who})` : "");
  return owner.slice(0, 200);
}

async function status(bin, name, env) {
  const done = await awsflock.run(bin, ["status", "--json", "--", name], env);
  if (done.code !== 0 && done.code !== 3) return { error: lastError(done), code: done.code };
  try {
    return { data: JSON.parse(done.stdout), code: done.code };
  } catch {
    return { error: `awsflock status printed no JSON (exit ${done.code})`, code: done.code };
  }
}

function lastError(done) {
  const failed = done.events.filter((e) => e.level === "error" || e.level === "warning");
  const last = failed[failed.length - 1];
  if (last) return last.message;
  return done.errors.join(" ").trim() || `awsflock exited ${done.code}`;
}

async function check(inputs, bin, env) {
  const { data, error, code } = await status(bin, inputs.name, env);
  if (error) throw new Error(`could not tell whether ${inputs.name} is held: ${error}`);
  const held = code === 0;
  runner.setOutput("acquired", "false");
  runner.setOutput("held", String(held));
  runner.setOutput("holder", format.holderJson(data));
  const said = held ? `held: ${format.holders(data).replace(/[\r\n]+/g, " ")}` : "free";
  runner.summary(`### awsflock: \`${inputs.name}\` is ${held ? "held" : "free"}\n\n${said}\n`);
  if (held && inputs.failIfHeld) {
    runner.error(`lock '${inputs.name}' is ${said} (mode: check fails while it is held)`);
    return 1;
  }
  runner.info(`lock '${inputs.name}' is ${said}`);
  return 0;
}

async function lock(inputs, bin, env) {
  const name = inputs.name;
  const args = ["acquire", "--json", "--while-pid", String(process.ppid)];
  args.push("--lease-duration", inputs.lease, "--wait-time", inputs.wait);
  args.push("--owner", inputs.owner || defaultOwner());
  if (inputs.fair) args.push("--fair");
  if (inputs.slots) args.push("--slots", inputs.slots);
  args.push("--", name); // a name may start with "-"

  let child = null;
  let cancelled = "";
  const cancel = (signal) => {
    // The runner cancels with SIGINT, then SIGTERM: either ends the wait (awsflock leaves the
    // line and takes nothing); a lease granted just before is saved for `post`.
    cancelled = cancelled || signal;
    if (child && child.exitCode === null) child.kill("SIGINT");
  };
  process.on("SIGINT", () => cancel("SIGINT"));
  process.on("SIGTERM", () => cancel("SIGTERM"));

  const began = Date.now();
  let holder = null; // status when the wait began
  let polling = false;
  let ticker = null;
  const progress = async () => {
    if (polling || !child || child.exitCode !== null) return;
    polling = true;
    try {
      const { data } = await status(bin, name, env);
      if (!data || child.exitCode !== null) return;
      if (holder === null) holder = data;
      const waited = format.seconds((Date.now() - began) / 1000);
      const line = Array.isArray(data.line) ? data.line : [];
      // Its place names the process the lease is kept for (the worker, --while-pid).
      const mine = line.find((w) => w.pid === process.ppid || w.pid === child.pid);
      const place = mine ? `, place ${mine.place} of ${line.length} in line` : "";
      runner.info(`waiting ${waited} for '${name}'${place}: ${format.holders(data)}`);
    } finally {
      polling = false;
    }
  };
  const onEvent = (event) => {
    if (event.event === "contended" && ticker === null) {
      runner.info(event.message);
      progress();
      ticker = setInterval(progress, PROGRESS_MS);
    } else if (event.level === "warning" && event.event !== "busy") {
      // Said once awsflock is done and a lease it printed is masked: a warning may name it.
      warnings.push(event);
    }
  };
  const warnings = [];
  const done = await awsflock.run(bin, args, env, { onEvent, started: (c) => (child = c) });
  if (ticker !== null) clearInterval(ticker);
  const waitedS = (Date.now() - began) / 1000;
  runner.setOutput("waited-seconds", waitedS.toFixed(1));
  runner.setOutput("holder", format.holderJson(holder));
  // A lease printed is ours whatever the exit status: a cancel that lands just after the
  // grant makes acquire exit 130 with the lease printed and kept alive.
  const lease = leaseIn(done.stdout);
  if (lease) {
    // Saved first: whatever happens next, `post` gives this lease back.
    runner.saveState("lease-id", lease.lease_id);
    runner.saveState("acquired-at", String(Date.now()));
    runner.mask(lease.lease_id);
  }
  for (const event of warnings) {
    // A cancel's "interrupted ..." is what was asked for: no annotation.
    (cancelled ? runner.info : runner.warning)(event.message);
  }
  if (lease && (cancelled || done.code !== 0)) {
    runner.setOutput("acquired", "false");
    if (cancelled) {
      runner.info(`cancelled just as '${name}' was granted: the post step gives it back`);
    } else {
      runner.error(`'${name}' was granted, then awsflock failed: ${lastError(done)} (the post step gives it back)`);
    }
    return 1;
  }

  if (!lease) {
    runner.setOutput("acquired", "false");
    if (cancelled || done.code === 130) {
      runner.info(`cancelled while waiting for '${name}': the lock was not taken`);
    } else if (done.code === 3) {
      const busy = done.events.find((e) => e.event === "busy");
      const now = busy ? busy.message : `lock '${name}' stayed held`;
      runner.error(`gave up waiting for '${name}' after ${format.seconds(waitedS)}: ${now}`);
    } else {
      runner.error(`could not take '${name}': ${lastError(done)}`);
    }
    return 1;
  }
  const granted = done.events.find((e) => e.event === "acquired") || {};
  const token = String(lease.fencing_token);
  runner.setOutput("acquired", "true");
  runner.setOutput("fencing-token", token);
  runner.exportVariable("AWSFLOCK_LOCK_ID", name);
  runner.exportVariable("AWSFLOCK_FENCING_TOKEN", token);
  if (lease.slot !== undefined && lease.slot !== null) {
    runner.setOutput("slot", String(lease.slot));
    runner.exportVariable("AWSFLOCK_SLOT", String(lease.slot));
  }
  const slot = lease.slot === undefined || lease.slot === null ? "" : `, slot ${lease.slot}`;
  runner.info(
    `acquired '${name}'${slot} (fencing token ${token}) after ${format.seconds(waitedS)}; ` +
      `held for the rest of the job (renewed every third of ${inputs.lease})`,
  );
  summarise(inputs, { token, slot, waitedS, holder, granted });
  return 0;
}

/** The lease `acquire --json` printed, if it printed one. */
function leaseIn(stdout) {
  try {
    const lease = JSON.parse(stdout);
    return lease && typeof lease.lease_id === "string" && lease.lease_id ? lease : null;
  } catch {
    return null;
  }
}

function summarise(inputs, { token, slot, waitedS, holder, granted }) {
  const cell = (text) => String(text).replace(/[\r\n]+/g, " ").replace(/\|/g, "\\|");
  const rows = [
    ["Fencing token", `\`${token}\`${slot}`],
    ["Waited", format.seconds(waitedS)],
  ];
  if (granted.handoff_s !== undefined && granted.handoff_s !== null) {
    rows.push(["Hand-off", `at most ${format.seconds(granted.handoff_s)} after the lock was last seen held`]);
  }
  rows.push(["Held when this job began waiting", holder ? format.holders(holder) : "free"]);
  const table = rows.map(([k, v]) => `| ${k} | ${cell(v)} |`).join("\n");
  runner.summary(`### awsflock: \`${inputs.name}\` held by this job\n\n| | |\n|---|---|\n${table}\n`);
}

async function main() {
  const inputs = readInputs();
  const bin = awsflock.ensure(inputs);
  const env = awsflock.storeEnv(inputs);
  runner.saveState("name", inputs.name);
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
