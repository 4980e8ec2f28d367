// @ts-check
// What the action's main step says: its log lines and its job summary, made from what awsflock
// printed (no side effects here: check.js and lock.js write them).
"use strict";

const format = require("./format");
const output = require("./output");

/** @typedef {import("./output").AwsflockEvent} AwsflockEvent */
/** @typedef {import("./output").Done} Done */
/** @typedef {import("./output").Lease} Lease */
/** @typedef {import("./output").Previous} Previous */
/** @typedef {import("./output").Status} Status */
/** @typedef {{level: "info" | "error", text: string}} Said */

/** @param {unknown} text */
const oneLine = (text) => String(text).replace(/[\r\n]+/g, " ");

/** The locks as a log line names them: 'deploy', or 'network', 'db'.
 * @param {string[]} names */
const named = (names) => names.map((n) => `'${n}'`).join(", ");

/** The locks as a job summary's title names them, each as code.
 * @param {string[]} names */
const titled = (names) => names.map((n) => `\`${n}\``).join(", ");

/** What mode check says of the locks (of the first held one, `look`): `said` for the log line,
 * `summary` for the job summary.
 * @param {string[]} names
 * @param {{name: string, data: Status | undefined}} look `status --json` of a held lock (or
 * of the first, none being held)
 * @param {boolean} held */
function checked(names, look, held) {
  const one = names.length === 1;
  const which = one ? "" : `'${look.name}' `;
  const state = held ? `${which}held: ${oneLine(format.holders(look.data))}` : "free";
  const said = one ? `lock ${named(names)} is ${state}` : `locks ${named(names)}: ${held ? state : "all free"}`;
  const summary = `### awsflock: ${titled(names)} ${one ? "is" : "are"} ${held ? "held" : "free"}\n\n${said}\n`;
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
 * @param {string[]} names
 * @param {{name: string, data: Status}} look `status --json` of the lock held (see checked)
 * @param {number} waitedS
 * @param {number[]} pids see `place` */
function waiting(names, look, waitedS, pids) {
  const waited = format.seconds(waitedS);
  const which = names.length === 1 ? "" : ` '${look.name}' held by`;
  return `waiting ${waited} for ${named(names)}${place(look.data, pids)}:${which} ${format.holders(look.data)}`;
}

/** Why the lock step failed, or null if it holds the lock: a cancel is said as information, the
 * rest as an error.
 * @param {string[]} names
 * @param {{lease: Lease | null, cancelled: string, done: Done, waitedS: number}} how
 * @returns {Said | null} */
function failure(names, { lease, cancelled, done, waitedS }) {
  const name = named(names);
  if (lease && cancelled) {
    return { level: "info", text: `cancelled just as ${name} was granted: the post step gives it back` };
  }
  if (lease && done.code !== 0) {
    const why = output.lastError(done);
    return { level: "error", text: `${name} was granted, then awsflock failed: ${why} (the post step gives it back)` };
  }
  if (lease) return null;
  if (cancelled || done.code === 130) {
    return { level: "info", text: `cancelled while waiting for ${name}: the lock was not taken` };
  }
  if (done.code === 3) {
    const busy = done.events.find((e) => e.event === "busy");
    const now = busy ? busy.message : `lock ${name} stayed held`;
    return { level: "error", text: `gave up waiting for ${name} after ${format.seconds(waitedS)}: ${now}` };
  }
  return { level: "error", text: `could not take ${name}: ${output.lastError(done)}` };
}

/** ", slot 2" for a pool's lease, "" for a plain lock's.
 * @param {Lease} lease */
function slotOf(lease) {
  return lease.slot === undefined || lease.slot === null ? "" : `, slot ${lease.slot}`;
}

/** Each lock's fencing token: a set's lease has them all, one lock's its own.
 * @param {string[]} names
 * @param {Lease} lease
 * @returns {Record<string, number>} */
function tokensOf(names, lease) {
  if (lease.fencing_tokens) return lease.fencing_tokens;
  return { [names[0]]: Number(lease.fencing_token) };
}

/** "fencing token 7", or "fencing tokens network 7, db 9".
 * @param {string[]} names
 * @param {Lease} lease */
function tokensSaid(names, lease) {
  const tokens = tokensOf(names, lease);
  if (names.length === 1) return `fencing token ${tokens[names[0]]}`;
  return `fencing tokens ${names.map((n) => `${n} ${tokens[n]}`).join(", ")}`;
}

/** The line that says the locks are held.
 * @param {string[]} names
 * @param {Lease} lease
 * @param {number} waitedS
 * @param {string} leaseInput the lease input (a duration) */
function acquired(names, lease, waitedS, leaseInput) {
  return (
    `acquired ${named(names)}${slotOf(lease)} (${tokensSaid(names, lease)}) after ` +
    `${format.seconds(waitedS)}; held for the rest of the job (renewed every third of ${leaseInput})`
  );
}

/** The job summary of a job that holds the locks: a table of their fencing tokens, the wait,
 * the hand-off and who held a lock when the wait began.
 * @param {string[]} names
 * @param {{lease: Lease, waitedS: number, holder: Status | null, granted: AwsflockEvent | undefined}} what */
function heldSummary(names, { lease, waitedS, holder, granted }) {
  /** @param {unknown} text */
  const cell = (text) => oneLine(text).replace(/\|/g, "\\|");
  const tokens = tokensOf(names, lease);
  const rows = [
    names.length === 1
      ? ["Fencing token", `\`${tokens[names[0]]}\`${slotOf(lease)}`]
      : ["Fencing tokens", names.map((n) => `${n} \`${tokens[n]}\``).join(", ")],
    ["Waited", format.seconds(waitedS)],
  ];
  const before = previousOf(names, lease);
  if (before) rows.push([names.length === 1 ? "Lease before" : "Leases before", before]);
  const handoff = granted ? granted.handoff_s : undefined;
  if (handoff !== undefined && handoff !== null) {
    rows.push(["Hand-off", `at most ${format.seconds(handoff)} after the lock was last seen held`]);
  }
  rows.push(["Held when this job began waiting", holder ? format.holders(holder) : "free"]);
  const table = rows.map(([k, v]) => `| ${k} | ${cell(v)} |`).join("\n");
  return `### awsflock: ${titled(names)} held by this job\n\n| | |\n|---|---|\n${table}\n`;
}

/** How the lease before each lock's ended, as the job summary says it ("" if not said).
 * @param {string[]} names
 * @param {Lease} lease */
function previousOf(names, lease) {
  const given = lease.previous;
  if (!given) return "";
  /** @type {Record<string, Previous>} */
  const each = "how" in given ? { [names[0]]: /** @type {Previous} */ (given) } : /** @type {Record<string, Previous>} */ (given);
  const said = names.filter((n) => each[n]).map((n) => [n, beforeSaid(each[n])]);
  return names.length === 1 ? (said[0] || ["", ""])[1] : said.map(([n, s]) => `${n}: ${s}`).join("; ");
}

/** "released", or who did not release the lease before, and when it ended.
 * @param {Previous} p */
function beforeSaid(p) {
  if (p.how !== "expired" && p.how !== "forced") return p.how;
  const where = [p.host && p.host !== p.owner ? `host ${p.host}` : "", p.ci_url || ""].filter(Boolean);
  const holder = (p.owner || "unknown owner") + (where.length ? ` (${where.join(", ")})` : "");
  const when = typeof p.ended_at === "number" ? ` at ${new Date(p.ended_at * 1000).toISOString().replace(/\.\d+Z$/, "Z")}` : "";
  if (p.how === "forced") return `**not released**: force-released${when} by ${p.forced_by || "an operator"} (held by ${holder})`;
  return `**not released** by ${holder}: its lease ran out${when}`;
}

module.exports = { acquired, checked, failure, heldSummary, named, place, slotOf, tokensOf, waiting };
