// @ts-check
// What the action reads of awsflock's output, declared once: the events of its JSON log lines
// on stderr (AWSFLOCK_LOG_FORMAT=json), the lease `acquire --json` prints and the object
// `status --json` prints. The typedefs below are all the action's code may read (tsc, strict);
// tests/test_action_events.py checks that they name only what this table declares, and runs
// awsflock to check that it writes every name and field here. A name renamed on either side
// fails that test.
"use strict";

/** Fields every JSON log line carries, which the action reads of any of them. */
const EVERY_EVENT = ["event", "level", "message"];

/** The events the action tells apart, each with the fields it reads beyond EVERY_EVENT's. */
const EVENTS = {
  /** The wait began (the lock is held): said, then the progress lines start. */
  contended: [],
  /** Gave up on a held lock: its message ends the action's error line. */
  busy: [],
  /** The grant: its hand-off bound goes into the job summary. */
  acquired: ["handoff_s"],
};

/** The levels the action tells apart (errors and warnings are what it reports). */
const LEVELS = ["warning", "error"];

/** What the action reads of the lease `acquire --json` prints (slot: a pool's only;
 * fencing_tokens: several locks' only, which have no fencing_token). */
const LEASE = ["lease_id", "fencing_token", "slot", "fencing_tokens", "previous"];

/** What the action reads of `status --json` for a plain lock (and of each of a pool's slots). */
const STATUS = [
  "state",
  "owner",
  "host",
  "ci_url",
  "acquired_at",
  "held_for_s",
  "expires_at",
  "expires_in_s",
  "reclaimable_in_s",
  "fencing_token",
  "line",
];

/** What it reads of a pool's `status --json` beyond a plain lock's. */
const POOL = ["slots", "slot_states"];

/** What it reads of each slot in `slot_states`, beyond a plain lock's fields. */
const SLOT = ["slot"];

/** What it reads of each waiter in `line` (fair waiting). */
const WAITER = ["pid", "place"];

/** @typedef {keyof typeof EVENTS} EventName */

/**
 * One JSON line of awsflock's stderr. `event` is typed as the names the action tells apart,
 * so that comparing it with any other name fails the type check; awsflock writes others too.
 * @typedef {object} AwsflockEvent
 * @property {EventName} event
 * @property {string} level
 * @property {string} message
 * @property {number | null} [handoff_s]
 */

/**
 * The lease `acquire --json` prints.
 * @typedef {object} Lease
 * @property {string} lease_id
 * @property {number} [fencing_token]
 * @property {number | null} [slot]
 * @property {Record<string, number>} [fencing_tokens]
 * @property {Previous | Record<string, Previous>} [previous]
 */

/**
 * How the lease before a grant ended (`previous` in `acquire --json`; a set's, by name).
 * @typedef {object} Previous
 * @property {string} how
 * @property {string} [owner]
 * @property {string} [host]
 * @property {string} [ci_url]
 * @property {number} [ended_at]
 * @property {string} [forced_by]
 */

/**
 * A waiter in a fair lock's line, from `status --json`.
 * @typedef {object} Waiter
 * @property {number | null} [pid]
 * @property {number} place
 */

/**
 * `status --json` of a plain lock, or of one slot of a pool (with `slot`), or of a pool (with
 * `slots` and `slot_states`).
 * @typedef {object} Status
 * @property {string} state
 * @property {string} [owner]
 * @property {string | null} [host]
 * @property {string | null} [ci_url]
 * @property {string | null} [acquired_at]
 * @property {number | null} [held_for_s]
 * @property {string} [expires_at]
 * @property {number} [expires_in_s]
 * @property {number} [reclaimable_in_s]
 * @property {number} [fencing_token]
 * @property {Waiter[]} [line]
 * @property {number} [slots]
 * @property {Status[]} [slot_states]
 * @property {number} [slot]
 */

/**
 * How a run of awsflock ended: its exit status, its stdout, its JSON log lines and its other
 * stderr lines.
 * @typedef {object} Done
 * @property {number} code
 * @property {string} stdout
 * @property {AwsflockEvent[]} events
 * @property {string[]} errors
 */

/** The fields of status the `holder` output keeps (of a pool: of each held slot, with `slot`).
 * @type {(keyof Status)[]} */
const HOLDER_KEEPS = ["owner", "host", "ci_url", "acquired_at", "held_for_s", "expires_at", "fencing_token"];

/** One line of awsflock's stderr as an event, or null if it is not a JSON object (a Python
 * traceback under --debug, a line from a library).
 * @param {string} text
 * @returns {AwsflockEvent | null} */
function parseEvent(text) {
  if (!text.trim()) return null;
  try {
    const event = JSON.parse(text);
    return event && typeof event === "object" && !Array.isArray(event) ? event : null;
  } catch {
    return null;
  }
}

/** The lease `acquire --json` printed, if it printed one (stdout is empty when it did not).
 * @param {string} stdout
 * @returns {Lease | null} */
function leaseIn(stdout) {
  try {
    const lease = JSON.parse(stdout);
    return lease && typeof lease.lease_id === "string" && lease.lease_id ? lease : null;
  } catch {
    return null;
  }
}

/** What went wrong, for an error line: the last error or warning awsflock said, else its
 * other stderr, else its exit status.
 * @param {Done} done */
function lastError(done) {
  const failed = done.events.filter((e) => e.level === "error" || e.level === "warning");
  const last = failed[failed.length - 1];
  if (last) return last.message;
  return done.errors.join(" ").trim() || `awsflock exited ${done.code}`;
}

module.exports = {
  EVENTS,
  EVERY_EVENT,
  HOLDER_KEEPS,
  LEASE,
  LEVELS,
  POOL,
  SLOT,
  STATUS,
  WAITER,
  lastError,
  leaseIn,
  parseEvent,
};
