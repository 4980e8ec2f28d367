// Built from action/src by action/build.mjs (npm run build): do not edit.
"use strict";
var __getOwnPropNames = Object.getOwnPropertyNames;
var __commonJS = (cb, mod) => function __require() {
  try {
    return mod || (0, cb[__getOwnPropNames(cb)[0]])((mod = { exports: {} }).exports, mod), mod.exports;
  } catch (e) {
    throw mod = 0, e;
  }
};

// src/output.js
var require_output = __commonJS({
  "src/output.js"(exports2, module2) {
    "use strict";
    var EVERY_EVENT = ["event", "level", "message"];
    var EVENTS = {
      /** The wait began (the lock is held): said, then the progress lines start. */
      contended: [],
      /** Gave up on a held lock: its message ends the action's error line. */
      busy: [],
      /** The grant: its hand-off bound goes into the job summary. */
      acquired: ["handoff_s"]
    };
    var LEVELS = ["warning", "error"];
    var LEASE = ["lease_id", "fencing_token", "slot", "fencing_tokens", "previous"];
    var STATUS = [
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
      "line"
    ];
    var POOL = ["slots", "slot_states"];
    var SLOT = ["slot"];
    var WAITER = ["pid", "place"];
    var HOLDER_KEEPS = ["owner", "host", "ci_url", "acquired_at", "held_for_s", "expires_at", "fencing_token"];
    function parseEvent(text) {
      if (!text.trim()) return null;
      try {
        const event = JSON.parse(text);
        return event && typeof event === "object" && !Array.isArray(event) ? event : null;
      } catch {
        return null;
      }
    }
    function leaseIn(stdout) {
      try {
        const lease = JSON.parse(stdout);
        return lease && typeof lease.lease_id === "string" && lease.lease_id ? lease : null;
      } catch {
        return null;
      }
    }
    function lastError(done) {
      const failed = done.events.filter((e) => e.level === "error" || e.level === "warning");
      const last = failed[failed.length - 1];
      if (last) return last.message;
      return done.errors.join(" ").trim() || `awsflock exited ${done.code}`;
    }
    module2.exports = {
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
      parseEvent
    };
  }
});

// src/runner.js
var require_runner = __commonJS({
  "src/runner.js"(exports2, module2) {
    "use strict";
    var crypto = require("node:crypto");
    var fs = require("node:fs");
    var os = require("node:os");
    function input(name) {
      const key = `INPUT_${name.replace(/ /g, "_").toUpperCase()}`;
      return (process.env[key] || "").trim();
    }
    function flag(name) {
      const value = input(name).toLowerCase();
      if (["true", "yes", "on", "1"].includes(value)) return true;
      if (["false", "no", "off", "0", ""].includes(value)) return false;
      throw new UsageError(`input ${name} must be true or false, not "${input(name)}"`);
    }
    var UsageError = class extends Error {
    };
    function appendTo(variable, name, value) {
      const file = process.env[variable];
      const text = String(value);
      if (!file) {
        const commands = { GITHUB_OUTPUT: "set-output", GITHUB_STATE: "save-state" };
        const command2 = commands[variable];
        if (command2) process.stdout.write(`::${command2} name=${name}::${escape(text)}${os.EOL}`);
        return;
      }
      const delimiter = `awsflock_${crypto.randomUUID()}`;
      if (name.includes(delimiter) || text.includes(delimiter)) throw new Error("delimiter clash");
      fs.appendFileSync(file, `${name}<<${delimiter}${os.EOL}${text}${os.EOL}${delimiter}${os.EOL}`);
    }
    var setOutput = (name, value) => appendTo("GITHUB_OUTPUT", name, value);
    var saveState = (name, value) => appendTo("GITHUB_STATE", name, value);
    var exportVariable = (name, value) => {
      process.env[name] = String(value);
      appendTo("GITHUB_ENV", name, value);
    };
    var state = (name) => process.env[`STATE_${name}`] || "";
    function addPath(dir) {
      process.env.PATH = `${dir}${require("node:path").delimiter}${process.env.PATH || ""}`;
      if (process.env.GITHUB_PATH) fs.appendFileSync(process.env.GITHUB_PATH, `${dir}${os.EOL}`);
    }
    function summary(markdown) {
      if (process.env.GITHUB_STEP_SUMMARY) {
        fs.appendFileSync(process.env.GITHUB_STEP_SUMMARY, markdown + os.EOL);
      }
    }
    function escape(text) {
      return String(text).replace(/%/g, "%25").replace(/\r/g, "%0D").replace(/\n/g, "%0A");
    }
    var command = (name, text) => process.stdout.write(`::${name}::${escape(text)}${os.EOL}`);
    var info = (text) => {
      const line = String(text).replace(/[\r\n]+/g, " ");
      process.stdout.write(`${line.startsWith("::") ? " " : ""}${line}${os.EOL}`);
    };
    var warning = (text) => command("warning", text);
    var error = (text) => command("error", text);
    var mask = (secret) => command("add-mask", secret);
    module2.exports = {
      UsageError,
      addPath,
      error,
      exportVariable,
      flag,
      info,
      input,
      mask,
      saveState,
      setOutput,
      state,
      summary,
      warning
    };
  }
});

// src/awsflock.js
var require_awsflock = __commonJS({
  "src/awsflock.js"(exports2, module2) {
    "use strict";
    var { spawn, spawnSync } = require("node:child_process");
    var crypto = require("node:crypto");
    var fs = require("node:fs");
    var os = require("node:os");
    var path = require("node:path");
    var output = require_output();
    var runner2 = require_runner();
    var ROOT = path.resolve(__dirname, "..", "..");
    function onPath(name) {
      for (const dir of (process.env.PATH || "").split(path.delimiter)) {
        if (!dir) continue;
        const candidate = path.join(dir, name);
        try {
          fs.accessSync(candidate, fs.constants.X_OK);
          if (fs.statSync(candidate).isFile()) return candidate;
        } catch {
        }
      }
      return "";
    }
    function extraFor(store) {
      if (/^postgres(ql)?:/.test(store)) return "[postgres]";
      if (/^rediss?:/.test(store)) return "[redis]";
      return "";
    }
    function versionOf(bin) {
      const done = spawnSync(bin, ["--version"], { encoding: "utf8", timeout: 6e4 });
      if (done.status !== 0) return "";
      const found = /awsflock,? (?:version )?(\S+)/.exec(done.stdout || "");
      return found ? found[1] : "";
    }
    function ownVersion(root = ROOT) {
      const text = fs.readFileSync(path.join(root, "pyproject.toml"), "utf8");
      const found = /^version\s*=\s*"([^"]+)"/m.exec(text);
      if (!found) throw new Error(`no version = "..." in ${path.join(root, "pyproject.toml")}`);
      return found[1];
    }
    function sourceFiles(dir) {
      const found = [];
      for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
        const full = path.join(dir, entry.name);
        if (entry.isDirectory() && entry.name !== "__pycache__") found.push(...sourceFiles(full));
        else if (entry.isFile() && !entry.name.endsWith(".pyc")) found.push(full);
      }
      return found.sort();
    }
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
    function ensure({ version, store }) {
      if (process.platform === "win32") {
        throw new runner2.UsageError(
          "awsflock's action runs on Linux and macOS runners: its keep-alive renewer and `run` need POSIX process groups and signals, which Windows runners lack (use a Linux job for the lock)"
        );
      }
      const wanted = version || ownVersion();
      const found = onPath("awsflock");
      if (found) {
        const has = versionOf(found);
        if (has === wanted) return found;
        runner2.info(
          `not using ${found}: it is awsflock ${has || "of an unknown version"}, and this action needs ${wanted}; using its own`
        );
      }
      const base = process.env.RUNNER_TOOL_CACHE || process.env.RUNNER_TEMP || os.tmpdir();
      const dir = path.join(base, "awsflock", installKey(version, store), process.arch);
      const bin = path.join(dir, "bin", "awsflock");
      if (!fs.existsSync(path.join(dir, ".complete"))) {
        install(dir, version ? `awsflock${extraFor(store)}==${version}` : ROOT + extraFor(store));
      }
      runner2.addPath(path.dirname(bin));
      return bin;
    }
    function install(dir, spec) {
      const python = onPath("python3") || onPath("python");
      if (!python) {
        throw new runner2.UsageError(
          "awsflock needs Python 3.9 or newer on the runner: add actions/setup-python before this step"
        );
      }
      runner2.info(`installing ${spec} into ${dir}`);
      fs.rmSync(dir, { recursive: true, force: true });
      const steps = [
        [python, ["-m", "venv", dir]],
        [
          path.join(dir, "bin", "python"),
          ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", spec]
        ]
      ];
      for (const [bin, args] of steps) {
        const done = spawnSync(bin, args, { stdio: ["ignore", "inherit", "inherit"] });
        if (done.status !== 0) {
          throw new Error(`could not install awsflock (${path.basename(bin)} ${args.join(" ")} failed)`);
        }
      }
      fs.writeFileSync(path.join(dir, ".complete"), spec + os.EOL);
    }
    function storeEnv({ store, table, region }) {
      const env = { AWSFLOCK_LOG_FORMAT: "json" };
      if (store) env.AWSFLOCK_STORE = store;
      else if (table) env.AWSFLOCK_TABLE = table;
      if (region) env.AWS_REGION = region;
      return env;
    }
    function run(bin, args, env, { onEvent = () => {
    }, started = () => {
    } } = {}) {
      return new Promise((resolve) => {
        const child = spawn(bin, args, {
          env: { ...process.env, ...env },
          stdio: ["ignore", "pipe", "pipe"]
        });
        started(child);
        let stdout = "";
        let pending = "";
        const said = [];
        const other = [];
        const line = (text) => {
          const event = output.parseEvent(text);
          if (event) {
            said.push(event);
            onEvent(event);
          } else if (text.trim()) {
            other.push(text);
          }
        };
        child.stdout.on("data", (chunk) => stdout += chunk);
        child.stderr.on("data", (chunk) => {
          pending += chunk;
          const lines = pending.split("\n");
          pending = lines.pop() || "";
          lines.forEach(line);
        });
        child.on("error", (err) => resolve({ code: 127, stdout, events: said, errors: [String(err)] }));
        child.on("close", (code, signal) => {
          line(pending);
          resolve({ code: exitCode(code, signal), stdout, events: said, errors: other });
        });
      });
    }
    function exitCode(code, signal) {
      if (code !== null) return code;
      return 128 + (signal && os.constants.signals[signal] || 0);
    }
    async function status(bin, name, env) {
      const done = await run(bin, ["status", "--json", "--", name], env);
      if (done.code !== 0 && done.code !== 3) return { error: output.lastError(done), code: done.code };
      try {
        return { data: JSON.parse(done.stdout), code: done.code };
      } catch {
        return { error: `awsflock status printed no JSON (exit ${done.code})`, code: done.code };
      }
    }
    module2.exports = { ensure, exitCode, installKey, ownVersion, run, status, storeEnv };
  }
});

// src/post.js
var awsflock = require_awsflock();
var runner = require_runner();
async function post() {
  const name = runner.state("name");
  const names = JSON.parse(runner.state("names") || "[]");
  const lease = runner.state("lease-id");
  if (!lease) {
    if (name) runner.info(`this job never held ${name}: nothing to release`);
    return 0;
  }
  runner.mask(lease);
  const bin = runner.state("bin") || "awsflock";
  const env = JSON.parse(runner.state("env") || "{}");
  process.on("SIGINT", () => {
  });
  const done = await awsflock.run(bin, ["release", "--", ...names, lease], env);
  const said = done.events.map((e) => e.message).filter(Boolean);
  if (done.code === 0) {
    const since = Number(runner.state("acquired-at"));
    const held = since ? ` (granted to this job at ${new Date(since).toISOString()})` : "";
    runner.info(`released ${name}${held}`);
    return 0;
  }
  if (done.code === 3) {
    runner.error(`the lock ${name} was lost while this job ran: ${said.join(" ") || "not held"}`);
    return 1;
  }
  runner.warning(
    `could not release ${name} (${said.join(" ") || `awsflock exited ${done.code}`}): it is freed when its lease runs out, at most the action's lease plus the skew window after the job ends`
  );
  return 0;
}
post().then(
  // exitCode, not exit(): output still queued for a pipe (macOS) is written first.
  (code) => process.exitCode = code,
  (err) => {
    runner.error(`awsflock action (post): ${err.message}`);
    process.exitCode = 1;
  }
);
