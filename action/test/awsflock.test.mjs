// How the action runs awsflock: the store its inputs name, and how a run's end is told.
import assert from "node:assert/strict";
import { test } from "node:test";
import awsflock from "../src/awsflock.js";

test("awsflock logs JSON, to the store URL if one is given, else to the table", () => {
  assert.deepEqual(awsflock.storeEnv({ store: "redis://cache:6379/0", table: "locks", region: "" }), {
    AWSFLOCK_LOG_FORMAT: "json",
    AWSFLOCK_STORE: "redis://cache:6379/0",
  });
  assert.deepEqual(awsflock.storeEnv({ store: "", table: "locks", region: "eu-west-1" }), {
    AWSFLOCK_LOG_FORMAT: "json",
    AWSFLOCK_TABLE: "locks",
    AWS_REGION: "eu-west-1",
  });
});

test("awsflock ended by a signal exits as a shell says it: 128 plus the signal's number", () => {
  assert.equal(awsflock.exitCode(3, null), 3);
  assert.equal(awsflock.exitCode(null, "SIGKILL"), 137);
  assert.equal(awsflock.exitCode(null, "SIGINT"), 130);
});
