// @ts-check
// Durations and holders as the action's log lines and job summary say them.
"use strict";

const output = require("./output");

/** @typedef {import("./output").Status} Status */

/** 75.2 -> "1m15s"; 4.25 -> "4.3s"; "?" for no number.
 * @param {number | string | null | undefined} value */
function seconds(value) {
  if (value === null || value === undefined || Number.isNaN(Number(value))) return "?";
  let s = Number(value);
  if (s < 60) return `${Math.round(s * 10) / 10}s`;
  s = Math.round(s);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = s % 60;
  return (h ? `${h}h` : "") + (m || h ? `${m}m` : "") + (rest ? `${rest}s` : "");
}

/** Who holds a plain lock, from `status --json`: "owner (run URL), held for 3m, lease expires
 * in 50s".
 * @param {Status | null | undefined} status */
function holder(status) {
  if (!status || status.state === "free") return "nobody";
  const who = status.owner || "unknown owner";
  const where = status.ci_url ? ` (${status.ci_url})` : status.host ? ` (host ${status.host})` : "";
  const since = status.held_for_s === null || status.held_for_s === undefined ? "" : `, held for ${seconds(status.held_for_s)}`;
  const left =
    status.state === "expired"
      ? `, lease expired (free in ${seconds(status.reclaimable_in_s)})`
      : `, lease expires in ${seconds(status.expires_in_s)}`;
  return who + where + since + left;
}

/** Who holds a plain lock or a pool's slots, from `status --json` (a pool's has
 * `slot_states`, one entry per slot).
 * @param {Status | null | undefined} status */
function holders(status) {
  if (!status || !Array.isArray(status.slot_states)) return holder(status);
  const held = status.slot_states.filter((s) => s.state === "held");
  if (!held.length) return "no slot held";
  const each = held.map((s) => `slot ${s.slot}: ${holder(s)}`).join("; ");
  return `${held.length} of ${status.slots} slots held (${each})`;
}

/** The holder output: what a later step may want of who held the lock (JSON).
 * @param {Status | null | undefined} status */
function holderJson(status) {
  if (!status || status.state === "free") return "";
  const keep = output.HOLDER_KEEPS;
  if (Array.isArray(status.slot_states)) {
    const held = status.slot_states.filter((s) => s.state === "held");
    return JSON.stringify({ slots: held.map((s) => pick(s, ["slot", ...keep])) });
  }
  return JSON.stringify(pick(status, keep));
}

/** The fields of `object` named in `keys` that have a value.
 * @param {Status} object
 * @param {(keyof Status)[]} keys */
function pick(object, keys) {
  /** @type {Record<string, unknown>} */
  const out = {};
  for (const key of keys) if (object[key] !== undefined && object[key] !== null) out[key] = object[key];
  return out;
}

module.exports = { holder, holderJson, holders, seconds };
