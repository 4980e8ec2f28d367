// @ts-check
// What the action's main step says: its log lines and its job summary, made from what awsflock
// printed (no side effects here: check.js and lock.js write them).
"use strict";

const format = require("./format");
const output = require("./output");

/** @typedef {import("./output").AwsflockEvent} AwsflockEvent */
/** @typedef {import("./output").Done} Done */
/** @typedef {import("./output").Lease} Lease */
/** @typedef {import("./output").Status} Status */
/** @typedef {{level: "info" | "error", text: string}} Said */

/** @param {unknown} text */
const oneLine = (text) => String(text).replace(/[\r\n]+/g, " ");

/** What mode check says of the lock: `said` for the log line, `summary` for the job summary.
 * @param {string} name
 * @param {Status | undefined} data `status --json`
 * @param {boolean} held */
function checked(name, data, held) {
  const said = held ? `held: ${oneLine(format.holders(data))}` : "free";
  const summary = `### awsflock: \`${name}\` is ${held ? "held" : "free"}\n\n${said}\n`;
  return { said, summary };
}

/** The place in line of the waiter whose pid is one of `pids` (the worker the lease is kept
 * for, or awsflock itself), as ", place 2 of 3 in line"; "" if it is not in line.
 * @param {Status} data `status --json`
 * @param {number[]} pids */
function place(data, pids) {
  const line = Array.isArray(data.line) ? data.line : [];
  const mine = line.find((w) => w.pid !== null && w.pid !== undefined && pids.includes(w.pid));
  return mine ? `, place ${mine.place} of ${line.length} in line` : "";
}

/** The line a waiting job says now and then.
 * @param {string} name
 * @param {Status} data `status --json`
 * @param {number} waitedS
 * @param {number[]} pids see `place` */
function waiting(name, data, waitedS, pids) {
  const waited = format.seconds(waitedS);
  return `waiting ${waited} for '${name}'${place(data, pids)}: ${format.holders(data)}`;
}

/** Why the lock step failed, or null if it holds the lock: a cancel is said as information, the
 * rest as an error.
 * @param {string} name
 * @param {{lease: Lease | null, cancelled: string, done: Done, waitedS: number}} how
 * @returns {Said | null} */
function failure(name, { lease, cancelled, done, waitedS }) {
  if (lease && cancelled) {
    return { level: "info", text: `cancelled just as '${name}' was granted: the post step gives it back` };
  }
  if (lease && done.code !== 0) {
    const why = output.lastError(done);
    return { level: "error", text: `'${name}' was granted, then awsflock failed: ${why} (the post step gives it back)` };
  }
  if (lease) return null;
  if (cancelled || done.code === 130) {
    return { level: "info", text: `cancelled while waiting for '${name}': the lock was not taken` };
  }
  if (done.code === 3) {
    const busy = done.events.find((e) => e.event === "busy");
    const now = busy ? busy.message : `lock '${name}' stayed held`;
    return { level: "error", text: `gave up waiting for '${name}' after ${format.seconds(waitedS)}: ${now}` };
  }
  return { level: "error", text: `could not take '${name}': ${output.lastError(done)}` };
}

/** ", slot 2" for a pool's lease, "" for a plain lock's.
 * @param {Lease} lease */
function slotOf(lease) {
  return lease.slot === undefined || lease.slot === null ? "" : `, slot ${lease.slot}`;
}

/** The line that says the lock is held.
 * @param {string} name
 * @param {Lease} lease
 * @param {number} waitedS
 * @param {string} leaseInput the lease input (a duration) */
function acquired(name, lease, waitedS, leaseInput) {
  return (
    `acquired '${name}'${slotOf(lease)} (fencing token ${lease.fencing_token}) after ` +
    `${format.seconds(waitedS)}; held for the rest of the job (renewed every third of ${leaseInput})`
  );
}

/** The job summary of a job that holds the lock: a table of its fencing token, its wait, the
 * hand-off and who held the lock when the wait began.
 * @param {string} name
 * @param {{lease: Lease, waitedS: number, holder: Status | null, granted: AwsflockEvent | undefined}} what */
function heldSummary(name, { lease, waitedS, holder, granted }) {
  /** @param {unknown} text */
  const cell = (text) => oneLine(text).replace(/\|/g, "\\|");
  const rows = [
    ["Fencing token", `\`${lease.fencing_token}\`${slotOf(lease)}`],
    ["Waited", format.seconds(waitedS)],
  ];
  const handoff = granted ? granted.handoff_s : undefined;
  if (handoff !== undefined && handoff !== null) {
    rows.push(["Hand-off", `at most ${format.seconds(handoff)} after the lock was last seen held`]);
  }
  rows.push(["Held when this job began waiting", holder ? format.holders(holder) : "free"]);
  const table = rows.map(([k, v]) => `| ${k} | ${cell(v)} |`).join("\n");
  return `### awsflock: \`${name}\` held by this job\n\n| | |\n|---|---|\n${table}\n`;
}

module.exports = { acquired, checked, failure, heldSummary, place, slotOf, waiting };
