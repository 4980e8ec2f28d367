// How durations and holders read in the action's log lines, summary and holder output.
import assert from "node:assert/strict";
import { test } from "node:test";
import format from "../src/format.js";

const ALICE = {
  state: "held",
  owner: "alice",
  host: "build-7",
  ci_url: "https://ci.example/runs/9",
  acquired_at: "2027-01-15T08:00:00Z",
  held_for_s: 75.2,
  expires_at: "2027-01-15T08:02:00Z",
  expires_in_s: 50,
  fencing_token: 12,
  lease_duration_s: 60,
};

test("durations read as seconds under a minute, then as hours, minutes and seconds", () => {
  assert.equal(format.seconds(4.25), "4.3s");
  assert.equal(format.seconds(0), "0s");
  assert.equal(format.seconds(75.2), "1m15s");
  assert.equal(format.seconds(3600), "1h0m");
  assert.equal(format.seconds(3725), "1h2m5s");
  assert.equal(format.seconds(null), "?");
  assert.equal(format.seconds("soon"), "?");
});

test("a holder is named with its run's URL, how long it held and when its lease ends", () => {
  assert.equal(
    format.holder(ALICE),
    "alice (https://ci.example/runs/9), held for 1m15s, lease expires in 50s",
  );
  const { ci_url, ...onHost } = ALICE;
  assert.equal(format.holder(onHost), "alice (host build-7), held for 1m15s, lease expires in 50s");
});

test("an expired lease says when the lock is free to take", () => {
  const expired = { ...ALICE, state: "expired", expires_in_s: -3, reclaimable_in_s: 7 };
  assert.match(format.holder(expired), /, lease expired \(free in 7s\)$/);
});

test("a free lock is held by nobody and has no holder output", () => {
  assert.equal(format.holders({ state: "free" }), "nobody");
  assert.equal(format.holderJson({ state: "free" }), "");
  assert.equal(format.holderJson(null), "");
});

test("a pool says how many of its slots are held, and by whom", () => {
  const pool = {
    state: "held",
    slots: 3,
    slot_states: [
      { ...ALICE, slot: 0 },
      { state: "free", slot: 1 },
      { ...ALICE, slot: 2, owner: "bob", ci_url: null, host: "build-8" },
    ],
  };
  const said = format.holders(pool);
  assert.match(said, /^2 of 3 slots held \(slot 0: alice .*; slot 2: bob \(host build-8\)/);
  /** @type {{slot: number, owner: string}[]} */
  const kept = JSON.parse(format.holderJson(pool)).slots;
  assert.deepEqual(kept.map((s) => [s.slot, s.owner]), [
    [0, "alice"],
    [2, "bob"],
  ]);
});

test("the holder output keeps who holds the lock and leaves out what is not known", () => {
  const held = JSON.parse(format.holderJson({ ...ALICE, host: null }));
  assert.deepEqual(held, {
    owner: "alice",
    ci_url: "https://ci.example/runs/9",
    acquired_at: "2027-01-15T08:00:00Z",
    held_for_s: 75.2,
    expires_at: "2027-01-15T08:02:00Z",
    fencing_token: 12,
  });
});
