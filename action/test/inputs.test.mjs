// The inputs a workflow gives, and the `awsflock acquire` command they make.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import inputs from "../src/inputs.js";

const DEFAULTS = {
  name: "'deploy'",
  names: ["deploy"],
  mode: "lock",
  failIfHeld: true,
  store: "",
  table: "",
  region: "",
  lease: "60s",
  wait: "30m",
  fair: true,
  shared: false,
  slots: "",
  owner: "",
  version: "",
};

/** @param {Record<string, string>} given the INPUT_ variables the runner would set */
function withInputs(given) {
  for (const key of Object.keys(process.env)) if (key.startsWith("INPUT_")) delete process.env[key];
  Object.assign(process.env, given);
}
afterEach(() => withInputs({}));

test("only the name is required: the rest take action.yml's defaults", () => {
  withInputs({ INPUT_NAME: " deploy " });
  assert.deepEqual(inputs.readInputs(), DEFAULTS);
});

test("a wrong input fails with a line that names it and what it takes", () => {
  withInputs({});
  assert.throws(
    () => inputs.readInputs(),
    /^Error: input name is required: the lock's name \(or names: several, one per line\)$/,
  );
  withInputs({ INPUT_NAME: "deploy", INPUT_MODE: "peek" });
  assert.throws(() => inputs.readInputs(), /input mode must be lock or check, not "peek"/);
  withInputs({ INPUT_NAME: "deploy", INPUT_SLOTS: "0" });
  assert.throws(() => inputs.readInputs(), /input slots must be a whole number of slots, not "0"/);
  withInputs({ INPUT_NAME: "deploy", "INPUT_FAIL-IF-HELD": "maybe" });
  assert.throws(() => inputs.readInputs(), /input fail-if-held must be true or false, not "maybe"/);
});

test("the acquire command keeps the lease alive while the runner's worker lives", () => {
  const args = inputs.acquireArgs({ ...DEFAULTS, owner: "ops" }, 4242);
  assert.deepEqual(args, [
    "acquire", "--json", "--while-pid", "4242",
    "--lease-duration", "60s", "--wait-time", "30m",
    "--owner", "ops", "--fair", "--", "deploy",
  ]);
});

test("a pool's slots and unfair waiting reach the command; a name starting with - stays a name", () => {
  const args = inputs.acquireArgs({ ...DEFAULTS, names: ["-x"], owner: "ops", fair: false, slots: "3" }, 1);
  assert.ok(!args.includes("--fair"));
  assert.deepEqual(args.slice(-4), ["--slots", "3", "--", "-x"]);
});

test("shared jobs take the lock --shared and are served as they come; not with slots", () => {
  const args = inputs.acquireArgs({ ...DEFAULTS, owner: "ops", shared: true }, 7);
  assert.ok(args.includes("--shared") && !args.includes("--fair"));
  assert.deepEqual(args.slice(-2), ["--", "deploy"]);
  withInputs({ INPUT_NAME: "state", INPUT_SHARED: "true" });
  assert.equal(inputs.readInputs().shared, true);
  withInputs({ INPUT_NAME: "state", INPUT_SHARED: "true", INPUT_SLOTS: "2" });
  assert.throws(() => inputs.readInputs(), /input shared takes a plain lock/);
  withInputs({ INPUT_NAME: "state", INPUT_SHARED: "sometimes" });
  assert.throws(() => inputs.readInputs(), /input shared must be true or false, not "sometimes"/);
});

test("names takes several locks, one per line, served as they come; not with name, slots or shared", () => {
  withInputs({ INPUT_NAMES: " network \n\n db\r\n-app \n" });
  const got = inputs.readInputs();
  assert.deepEqual(got.names, ["network", "db", "-app"]);
  assert.equal(got.name, "'network', 'db', '-app'");
  const args = inputs.acquireArgs({ ...got, owner: "ops" }, 7);
  assert.ok(!args.includes("--fair")); // a line per name would have them wait in several
  assert.deepEqual(args.slice(-4), ["--", "network", "db", "-app"]);
  withInputs({ INPUT_NAMES: "deploy" }); // one name in names is one lock, served in order
  assert.ok(inputs.acquireArgs({ ...inputs.readInputs(), owner: "ops" }, 7).includes("--fair"));
  withInputs({ INPUT_NAME: "a", INPUT_NAMES: "b\nc" });
  assert.throws(() => inputs.readInputs(), /give input name \(one lock\) or names \(several\), not both/);
  withInputs({ INPUT_NAMES: "a\nb", INPUT_SLOTS: "2" });
  assert.throws(() => inputs.readInputs(), /input slots takes one lock: give name, or drop slots/);
  withInputs({ INPUT_NAMES: "a\nb", INPUT_SHARED: "true" });
  assert.throws(() => inputs.readInputs(), /input shared takes one lock: give name, or drop shared/);
});

test("without an owner input, waiting jobs see the repository, workflow, job and actor", () => {
  const env = {
    GITHUB_REPOSITORY: "acme/shop",
    GITHUB_WORKFLOW: "deploy",
    GITHUB_JOB: "prod",
    GITHUB_ACTOR: "alice",
    GITHUB_REF_NAME: "main",
  };
  assert.equal(inputs.defaultOwner(env), "acme/shop: deploy / prod (alice, main)");
  assert.equal(inputs.defaultOwner({}), "github-actions");
  assert.equal(inputs.defaultOwner({ GITHUB_REPOSITORY: "a".repeat(300) }).length, 200);
  const args = inputs.acquireArgs(DEFAULTS, 1, env);
  assert.equal(args[args.indexOf("--owner") + 1], "acme/shop: deploy / prod (alice, main)");
});
