// @ts-check
// Finding (or installing) the awsflock command and running it with the store the inputs name.
"use strict";

const { spawn, spawnSync } = require("node:child_process");
const crypto = require("node:crypto");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const output = require("./output");
const runner = require("./runner");

/** @typedef {import("./output").AwsflockEvent} AwsflockEvent */
/** @typedef {import("./output").Done} Done */
/** @typedef {import("./output").Status} Status */

/** The action's own checkout: action.yml and awsflock's sources (dist/ is two levels down). */
const ROOT = path.resolve(__dirname, "..", "..");

/** @param {string} name */
function onPath(name) {
  for (const dir of (process.env.PATH || "").split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.statSync(candidate).isFile()) return candidate;
    } catch {
      // not here
    }
  }
  return "";
}

/** The extra a store URL needs (psycopg, redis-py), for an install.
 * @param {string} store */
function extraFor(store) {
  if (/^postgres(ql)?:/.test(store)) return "[postgres]";
  if (/^rediss?:/.test(store)) return "[redis]";
  return "";
}

/** The version `awsflock --version` prints (its first line: "awsflock X.Y.Z ...").
 * @param {string} bin */
function versionOf(bin) {
  const done = spawnSync(bin, ["--version"], { encoding: "utf8", timeout: 60000 });
  if (done.status !== 0) return "";
  const found = /awsflock,? (?:version )?(\S+)/.exec(done.stdout || "");
  return found ? found[1] : "";
}

/** The version of awsflock in the action's checkout (pyproject.toml): the one its main and post
 * were written for. */
function ownVersion(root = ROOT) {
  const text = fs.readFileSync(path.join(root, "pyproject.toml"), "utf8");
  const found = /^version\s*=\s*"([^"]+)"/m.exec(text);
  if (!found) throw new Error(`no version = "..." in ${path.join(root, "pyproject.toml")}`);
  return found[1];
}

/** The files of the package's source, sorted (no byte-code).
 * @param {string} dir
 * @returns {string[]} */
function sourceFiles(dir) {
  /** @type {string[]} */
  const found = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory() && entry.name !== "__pycache__") found.push(...sourceFiles(full));
    else if (entry.isFile() && !entry.name.endsWith(".pyc")) found.push(full);
  }
  return found.sort();
}

/** The tool cache's name for the awsflock an install would give: a PyPI release by its version;
 * the checkout by its version and a hash of what it installs (pyproject.toml and awsflock/), so
 * that a changed checkout (a moved v1 tag on a self-hosted runner) is installed anew.
 * @param {string} version
 * @param {string} store
 * @param {string} [root] */
function installKey(version, store, root = ROOT) {
  let key = version;
  if (!version) {
    const hash = crypto.createHash("sha256");
    const files = [path.join(root, "pyproject.toml"), ...sourceFiles(path.join(root, "awsflock"))];
    for (const file of files) {
      hash.update(path.relative(root, file)).update("\0").update(fs.readFileSync(file)).update("\0");
    }
    key = `${ownVersion(root)}-src-${hash.digest("hex").slice(0, 16)}`;
  }
  return key + extraFor(store).replace(/\W/g, "");
}

/** The awsflock to run: the one on PATH if it is the version wanted (`version`, else the
 * checkout's own), else one installed into the runner's tool cache (kept there, so later jobs
 * on a self-hosted runner reuse it).
 * @param {{version: string, store: string}} inputs */
function ensure({ version, store }) {
  if (process.platform === "win32") {
    throw new runner.UsageError(
      "awsflock's action runs on Linux and macOS runners: its keep-alive renewer and `run` need " +
        "POSIX process groups and signals, which Windows runners lack (use a Linux job for the lock)",
    );
  }
  const wanted = version || ownVersion();
  const found = onPath("awsflock");
  if (found) {
    const has = versionOf(found);
    if (has === wanted) return found;
    runner.info(
      `not using ${found}: it is awsflock ${has || "of an unknown version"}, and this action ` +
        `needs ${wanted}; using its own`,
    );
  }
  const base = process.env.RUNNER_TOOL_CACHE || process.env.RUNNER_TEMP || os.tmpdir();
  const dir = path.join(base, "awsflock", installKey(version, store), process.arch);
  const bin = path.join(dir, "bin", "awsflock");
  if (!fs.existsSync(path.join(dir, ".complete"))) {
    install(dir, version ? `awsflock${extraFor(store)}==${version}` : ROOT + extraFor(store));
  }
  runner.addPath(path.dirname(bin));
  return bin;
}

/** @param {string} dir @param {string} spec */
function install(dir, spec) {
  const python = onPath("python3") || onPath("python");
  if (!python) {
    throw new runner.UsageError(
      "awsflock needs Python 3.9 or newer on the runner: add actions/setup-python before this step",
    );
  }
  runner.info(`installing ${spec} into ${dir}`);
  fs.rmSync(dir, { recursive: true, force: true });
  /** @type {[string, string[]][]} */
  const steps = [
    [python, ["-m", "venv", dir]],
    [
      path.join(dir, "bin", "python"),
      ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", spec],
    ],
  ];
  for (const [bin, args] of steps) {
    const done = spawnSync(bin, args, { stdio: ["ignore", "inherit", "inherit"] });
    if (done.status !== 0) {
      throw new Error(`could not install awsflock (${path.basename(bin)} ${args.join(" ")} failed)`);
    }
  }
  fs.writeFileSync(path.join(dir, ".complete"), spec + os.EOL);
}

/** The environment that points awsflock at the inputs' store (saved for `post`).
 * @param {{store: string, table: string, region: string}} inputs
 * @returns {Record<string, string>} */
function storeEnv({ store, table, region }) {
  /** @type {Record<string, string>} */
  const env = { AWSFLOCK_LOG_FORMAT: "json" };
  if (store) env.AWSFLOCK_STORE = store;
  else if (table) env.AWSFLOCK_TABLE = table;
  if (region) env.AWS_REGION = region;
  return env;
}

/** Run awsflock to its end: {code, stdout, events (its JSON log lines), errors (other lines)}.
 * `onEvent` sees each event as it comes; `started` gets the child (to signal it).
 * @param {string} bin
 * @param {string[]} args
 * @param {Record<string, string>} env
 * @param {{onEvent?: (event: AwsflockEvent) => void,
 *          started?: (child: import("node:child_process").ChildProcess) => void}} [hooks]
 * @returns {Promise<Done>} */
function run(bin, args, env, { onEvent = () => {}, started = () => {} } = {}) {
  return new Promise((resolve) => {
    const child = spawn(bin, args, {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    started(child);
    let stdout = "";
    let pending = "";
    /** @type {AwsflockEvent[]} */
    const said = [];
    /** @type {string[]} */
    const other = [];
    /** @param {string} text */
    const line = (text) => {
      const event = output.parseEvent(text);
      if (event) {
        said.push(event);
        onEvent(event);
      } else if (text.trim()) {
        other.push(text);
      }
    };
    child.stdout.on("data", (chunk) => (stdout += chunk));
    child.stderr.on("data", (chunk) => {
      pending += chunk;
      const lines = pending.split("\n");
      pending = lines.pop() || "";
      lines.forEach(line);
    });
    child.on("error", (err) => resolve({ code: 127, stdout, events: said, errors: [String(err)] }));
    // "close": the pipes are drained (awsflock's renewer holds neither of them).
    child.on("close", (code, signal) => {
      line(pending);
      resolve({ code: exitCode(code, signal), stdout, events: said, errors: other });
    });
  });
}

/** A child's exit status as a shell gives it: 128 + the signal's number if a signal ended it.
 * @param {number | null} code
 * @param {NodeJS.Signals | null} signal */
function exitCode(code, signal) {
  if (code !== null) return code;
  return 128 + ((signal && os.constants.signals[signal]) || 0);
}

/** `status --json` of a lock: its data and exit status (0: held, 3: not held), or an error.
 * @param {string} bin
 * @param {string} name
 * @param {Record<string, string>} env
 * @returns {Promise<{data?: Status, error?: string, code: number}>} */
async function status(bin, name, env) {
  const done = await run(bin, ["status", "--json", "--", name], env);
  if (done.code !== 0 && done.code !== 3) return { error: output.lastError(done), code: done.code };
  try {
    return { data: JSON.parse(done.stdout), code: done.code };
  } catch {
    return { error: `awsflock status printed no JSON (exit ${done.code})`, code: done.code };
  }
}

module.exports = { ensure, exitCode, installKey, ownVersion, run, status, storeEnv };
