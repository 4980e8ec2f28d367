// Reading what awsflock writes: its JSON log lines, the lease it prints, the error to report.
import assert from "node:assert/strict";
import { test } from "node:test";
import output from "../src/output.js";

test("a JSON log line is an event; any other stderr line is not", () => {
  const line = '{"ts": 1, "level": "warning", "event": "busy", "message": "lock x is held"}';
  assert.equal(output.parseEvent(line)?.message, "lock x is held");
  assert.equal(output.parseEvent("Traceback (most recent call last):"), null);
  assert.equal(output.parseEvent("   "), null);
  assert.equal(output.parseEvent("42"), null);
  assert.equal(output.parseEvent("[1, 2]"), null);
});

test("the lease is read from acquire's stdout, and nothing else counts as one", () => {
  const printed = '{"lease_id": "4b1c", "fencing_token": 7, "slot": null}\n';
  assert.deepEqual(output.leaseIn(printed), { lease_id: "4b1c", fencing_token: 7, slot: null });
  assert.equal(output.leaseIn(""), null);
  assert.equal(output.leaseIn('{"lease_id": ""}'), null);
  assert.equal(output.leaseIn('{"fencing_token": 7}'), null);
  assert.equal(output.leaseIn("4b1c"), null);
});

/** @param {object} parts */
const done = (parts) => ({ code: 1, stdout: "", events: [], errors: [], ...parts });

test("an error line names awsflock's last error or warning", () => {
  const events = [
    { event: "log", level: "warning", message: "retrying" },
    { event: "log", level: "error", message: "no table awsflock-locks: run awsflock init" },
    { event: "log", level: "info", message: "bye" },
  ];
  assert.equal(output.lastError(done({ events })), "no table awsflock-locks: run awsflock init");
});

test("without an error event, the error line gives awsflock's other stderr, else its exit status", () => {
  assert.equal(output.lastError(done({ errors: ["  python3: bad interpreter "] })), "python3: bad interpreter");
  assert.equal(output.lastError(done({ code: 4 })), "awsflock exited 4");
});
