// What the main step says: how a wait stands, why it failed, the grant and its job summary.
import assert from "node:assert/strict";
import { test } from "node:test";
import report from "../src/report.js";

const ALICE = { state: "held", owner: "alice", held_for_s: 30, expires_in_s: 50 };

/** @param {object} parts */
const done = (parts) => ({ code: 0, stdout: "", events: [], errors: [], ...parts });
const LEASE = { lease_id: "4b1c", fencing_token: 7 };

test("a waiting job says how long it waited, its place in line and who holds the lock", () => {
  const data = { ...ALICE, line: [{ pid: 10, place: 1 }, { pid: 20, place: 2 }] };
  assert.equal(
    report.waiting(["deploy"], { name: "deploy", data }, 65, [20, 99]),
    "waiting 1m5s for 'deploy', place 2 of 2 in line: alice, held for 30s, lease expires in 50s",
  );
  assert.equal(report.place(data, [30]), "");
  assert.equal(report.place({ ...ALICE, line: [{ pid: null, place: 1 }] }, [30]), "");
  assert.equal(report.place(ALICE, [10]), "");
});

test("a lease granted, then lost to a failure or a cancel, is said to be given back by post", () => {
  const failed = done({ code: 1, events: [{ event: "log", level: "error", message: "disk full" }] });
  assert.deepEqual(report.failure(["deploy"], { lease: LEASE, cancelled: "", done: failed, waitedS: 1 }), {
    level: "error",
    text: "'deploy' was granted, then awsflock failed: disk full (the post step gives it back)",
  });
  const cancelled = report.failure(["deploy"], { lease: LEASE, cancelled: "SIGINT", done: done({ code: 130 }), waitedS: 1 });
  assert.deepEqual(cancelled, {
    level: "info",
    text: "cancelled just as 'deploy' was granted: the post step gives it back",
  });
});

test("a held lease is no failure", () => {
  assert.equal(report.failure(["deploy"], { lease: LEASE, cancelled: "", done: done({}), waitedS: 1 }), null);
});

test("a cancelled wait is information, not an error", () => {
  /** @type {[string, number][]} */
  const ends = [["SIGTERM", 1], ["", 130]];
  for (const [cancelled, code] of ends) {
    const said = report.failure(["deploy"], { lease: null, cancelled, done: done({ code }), waitedS: 9 });
    assert.deepEqual(said, { level: "info", text: "cancelled while waiting for 'deploy': the lock was not taken" });
  }
});

test("a wait that runs out says how long it waited and who held the lock then", () => {
  const busy = { event: "busy", level: "warning", message: "lock 'deploy' is held by alice" };
  const said = report.failure(["deploy"], { lease: null, cancelled: "", done: done({ code: 3, events: [busy] }), waitedS: 90 });
  assert.deepEqual(said, { level: "error", text: "gave up waiting for 'deploy' after 1m30s: lock 'deploy' is held by alice" });
  const quiet = report.failure(["deploy"], { lease: null, cancelled: "", done: done({ code: 3 }), waitedS: 2 });
  assert.equal(quiet?.text, "gave up waiting for 'deploy' after 2s: lock 'deploy' stayed held");
});

test("any other failure says what awsflock said", () => {
  const said = report.failure(["deploy"], { lease: null, cancelled: "", done: done({ code: 2, errors: ["no such option"] }), waitedS: 0 });
  assert.deepEqual(said, { level: "error", text: "could not take 'deploy': no such option" });
});

test("the grant names the slot and the fencing token", () => {
  assert.equal(
    report.acquired(["deploy"], { ...LEASE, slot: 2 }, 4.25, "60s"),
    "acquired 'deploy', slot 2 (fencing token 7) after 4.3s; held for the rest of the job (renewed every third of 60s)",
  );
  assert.match(report.acquired(["deploy"], { ...LEASE, slot: null }, 0, "2m"), /^acquired 'deploy' \(fencing token 7\)/);
});

test("the summary of a held lock tabulates token, wait, hand-off and who held it before", () => {
  const granted = { event: /** @type {const} */ ("acquired"), level: "notice", message: "", handoff_s: 0.8 };
  const owner = { ...ALICE, owner: "mallory | x\nsecond" };
  const summary = report.heldSummary(["deploy"], { lease: LEASE, waitedS: 12, holder: owner, granted });
  assert.equal(
    summary,
    "### awsflock: `deploy` held by this job\n\n| | |\n|---|---|\n" +
      "| Fencing token | `7` |\n" +
      "| Waited | 12s |\n" +
      "| Hand-off | at most 0.8s after the lock was last seen held |\n" +
      "| Held when this job began waiting | mallory \\| x second, held for 30s, lease expires in 50s |\n",
  );
  const free = report.heldSummary(["deploy"], { lease: LEASE, waitedS: 0, holder: null, granted: undefined });
  assert.ok(!free.includes("Hand-off") && free.endsWith("| Held when this job began waiting | free |\n"));
});

test("mode check says held, with the holder on one line, or free", () => {
  const { said, summary } = report.checked(["deploy"], { name: "deploy", data: { ...ALICE, owner: "a\nb" } }, true);
  assert.equal(said, "lock 'deploy' is held: a b, held for 30s, lease expires in 50s");
  assert.equal(summary, `### awsflock: \`deploy\` is held\n\n${said}\n`);
  assert.deepEqual(report.checked(["deploy"], { name: "deploy", data: { state: "free" } }, false), {
    said: "lock 'deploy' is free",
    summary: "### awsflock: `deploy` is free\n\nlock 'deploy' is free\n",
  });
});

test("with several locks, mode check and a waiting job name the one held", () => {
  const names = ["network", "db"];
  const look = { name: "db", data: ALICE };
  const { said, summary } = report.checked(names, look, true);
  assert.equal(said, "locks 'network', 'db': 'db' held: alice, held for 30s, lease expires in 50s");
  assert.ok(summary.startsWith("### awsflock: `network`, `db` are held\n"));
  assert.equal(report.checked(names, { name: "network", data: { state: "free" } }, false).said, "locks 'network', 'db': all free");
  assert.equal(
    report.waiting(names, look, 3, [1]),
    "waiting 3s for 'network', 'db': 'db' held by alice, held for 30s, lease expires in 50s",
  );
});

test("several locks granted: each one's fencing token in the line and the summary", () => {
  const lease = { lease_id: "1b2c", fencing_tokens: { network: 5, db: 9 } };
  assert.match(report.acquired(["network", "db"], lease, 1, "60s"), /^acquired 'network', 'db' \(fencing tokens network 5, db 9\) after 1s;/);
  const summary = report.heldSummary(["network", "db"], { lease, waitedS: 1, holder: null, granted: undefined });
  assert.ok(summary.startsWith("### awsflock: `network`, `db` held by this job\n"), summary);
  assert.ok(summary.includes("| Fencing tokens | network `5`, db `9` |"), summary);
});

test("the job summary says how the lease before ended, and who did not release it", () => {
  const dead = { how: "expired", lease_id: "L", owner: "ci-7", ci_url: "https://ci/9", ended_at: 1796014396 };
  const one = report.heldSummary(["deploy"], { lease: { ...LEASE, previous: dead }, waitedS: 3, holder: null, granted: undefined });
  assert.ok(one.includes("| Lease before | **not released** by ci-7 (https://ci/9): its lease ran out at 2026-11-30T04:53:16Z |"), one);
  const clean = report.heldSummary(["deploy"], { lease: { ...LEASE, previous: { how: "released" } }, waitedS: 3, holder: null, granted: undefined });
  assert.ok(clean.includes("| Lease before | released |"), clean);
  const forced = { how: "forced", owner: "bob", forced_by: "alice", ended_at: 0 };
  const lease = { lease_id: "S", fencing_tokens: { network: 5, db: 9 }, previous: { network: { how: "first" }, db: forced } };
  const two = report.heldSummary(["network", "db"], { lease, waitedS: 1, holder: null, granted: undefined });
  assert.ok(
    two.includes("| Leases before | network: first; db: **not released**: force-released at 1970-01-01T00:00:00Z by alice (held by bob) |"),
    two,
  );
  assert.ok(!report.heldSummary(["deploy"], { lease: LEASE, waitedS: 0, holder: null, granted: undefined }).includes("before"));
});
