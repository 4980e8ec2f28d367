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
        const command2 = { GITHUB_OUTPUT: "set-output", GITHUB_STATE: "save-state" }[variable];
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
        const events = [];
        const other = [];
        const line = (text) => {
          if (!text.trim()) return;
          try {
            const event = JSON.parse(text);
            events.push(event);
            onEvent(event);
          } catch {
            other.push(text);
          }
        };
        child.stdout.on("data", (chunk) => stdout += chunk);
        child.stderr.on("data", (chunk) => {
          pending += chunk;
          const lines = pending.split("\n");
          pending = lines.pop();
          lines.forEach(line);
        });
        child.on("error", (err) => resolve({ code: 127, stdout, events, errors: [String(err)] }));
        child.on("close", (code, signal) => {
          line(pending);
          resolve({ code: code === null ? 128 + (os.constants.signals[signal] || 0) : code, stdout, events, errors: other });
        });
      });
    }
    module2.exports = { ensure, installKey, ownVersion, run, storeEnv };
  }
});

// src/format.js
var require_format = __commonJS({
  "src/format.js"(exports2, module2) {
    "use strict";
    function seconds(value) {
      if (value === null || value === void 0 || Number.isNaN(Number(value))) return "?";
      let s = Number(value);
      if (s < 60) return `${Math.round(s * 10) / 10}s`;
      s = Math.round(s);
      const h = Math.floor(s / 3600);
      const m = Math.floor(s % 3600 / 60);
      const rest = s % 60;
      return (h ? `${h}h` : "") + (m || h ? `${m}m` : "") + (rest ? `${rest}s` : "");
    }
    function holder(status2) {
      if (!status2 || status2.state === "free") return "nobody";
      const who = status2.owner || "unknown owner";
      const where = status2.ci_url ? ` (${status2.ci_url})` : status2.host ? ` (host ${status2.host})` : "";
      const since = status2.held_for_s === null || status2.held_for_s === void 0 ? "" : `, held for ${seconds(status2.held_for_s)}`;
      const left = status2.state === "expired" ? `, lease expired (free in ${seconds(status2.reclaimable_in_s)})` : `, lease expires in ${seconds(status2.expires_in_s)}`;
      return who + where + since + left;
    }
    function holders(status2) {
      if (!status2 || !Array.isArray(status2.slot_states)) return holder(status2);
      const held = status2.slot_states.filter((s) => s.state === "held");
      if (!held.length) return "no slot held";
      const each = held.map((s) => `slot ${s.slot}: ${holder(s)}`).join("; ");
      return `${held.length} of ${status2.slots} slots held (${each})`;
    }
    function holderJson(status2) {
      if (!status2 || status2.state === "free") return "";
      const keep = ["owner", "host", "ci_url", "acquired_at", "held_for_s", "expires_at", "fencing_token"];
      if (Array.isArray(status2.slot_states)) {
        const held = status2.slot_states.filter((s) => s.state === "held");
        return JSON.stringify({ slots: held.map((s) => pick(s, ["slot", ...keep])) });
      }
      return JSON.stringify(pick(status2, keep));
    }
    function pick(object, keys) {
      const out = {};
      for (const key of keys) if (object[key] !== void 0 && object[key] !== null) out[key] = object[key];
      return out;
    }
    module2.exports = { holder, holderJson, holders, seconds };
  }
});

// src/main.js
var awsflock = require_awsflock();
var format = require_format();
var runner = require_runner();
var PROGRESS_MS = 5e3;
function readInputs() {
  const inputs = {
    name: runner.input("name"),
    mode: runner.input("mode") || "lock",
    failIfHeld: runner.input("fail-if-held") === "" ? true : runner.flag("fail-if-held"),
    store: runner.input("store"),
    table: runner.input("table"),
    region: runner.input("region"),
    lease: runner.input("lease") || "60s",
    wait: runner.input("wait") || "30m",
    fair: runner.input("fair") === "" ? true : runner.flag("fair"),
    slots: runner.input("slots"),
    owner: runner.input("owner"),
    version: runner.input("version")
  };
  if (!inputs.name) throw new runner.UsageError("input name is required: the lock's name");
  if (!["lock", "check"].includes(inputs.mode)) {
    throw new runner.UsageError(`input mode must be lock or check, not "${inputs.mode}"`);
  }
  if (inputs.slots && !/^[1-9][0-9]*$/.test(inputs.slots)) {
    throw new runner.UsageError(`input slots must be a whole number of slots, not "${inputs.slots}"`);
  }
  return inputs;
}
function defaultOwner() {
  const e = process.env;
  const where = [e.GITHUB_REPOSITORY, e.GITHUB_WORKFLOW].filter(Boolean).join(": ");
  const job = e.GITHUB_JOB ? ` / ${e.GITHUB_JOB}` : "";
  const who = [e.GITHUB_ACTOR, e.GITHUB_REF_NAME].filter(Boolean).join(", ");
  const owner = (where || "github-actions") + job + (who ? ` (${who})` : "");
  return owner.slice(0, 200);
}
async function status(bin, name, env) {
  const done = await awsflock.run(bin, ["status", "--json", "--", name], env);
  if (done.code !== 0 && done.code !== 3) return { error: lastError(done), code: done.code };
  try {
    return { data: JSON.parse(done.stdout), code: done.code };
  } catch {
    return { error: `awsflock status printed no JSON (exit ${done.code})`, code: done.code };
  }
}
function lastError(done) {
  const failed = done.events.filter((e) => e.level === "error" || e.level === "warning");
  const last = failed[failed.length - 1];
  if (last) return last.message;
  return done.errors.join(" ").trim() || `awsflock exited ${done.code}`;
}
async function check(inputs, bin, env) {
  const { data, error, code } = await status(bin, inputs.name, env);
  if (error) throw new Error(`could not tell whether ${inputs.name} is held: ${error}`);
  const held = code === 0;
  runner.setOutput("acquired", "false");
  runner.setOutput("held", String(held));
  runner.setOutput("holder", format.holderJson(data));
  const said = held ? `held: ${format.holders(data).replace(/[\r\n]+/g, " ")}` : "free";
  runner.summary(`### awsflock: \`${inputs.name}\` is ${held ? "held" : "free"}

${said}
`);
  if (held && inputs.failIfHeld) {
    runner.error(`lock '${inputs.name}' is ${said} (mode: check fails while it is held)`);
    return 1;
  }
  runner.info(`lock '${inputs.name}' is ${said}`);
  return 0;
}
async function lock(inputs, bin, env) {
  const name = inputs.name;
  const args = ["acquire", "--json", "--while-pid", String(process.ppid)];
  args.push("--lease-duration", inputs.lease, "--wait-time", inputs.wait);
  args.push("--owner", inputs.owner || defaultOwner());
  if (inputs.fair) args.push("--fair");
  if (inputs.slots) args.push("--slots", inputs.slots);
  args.push("--", name);
  let child = null;
  let cancelled = "";
  const cancel = (signal) => {
    cancelled = cancelled || signal;
    if (child && child.exitCode === null) child.kill("SIGINT");
  };
  process.on("SIGINT", () => cancel("SIGINT"));
  process.on("SIGTERM", () => cancel("SIGTERM"));
  const began = Date.now();
  let holder = null;
  let polling = false;
  let ticker = null;
  const progress = async () => {
    if (polling || !child || child.exitCode !== null) return;
    polling = true;
    try {
      const { data } = await status(bin, name, env);
      if (!data || child.exitCode !== null) return;
      if (holder === null) holder = data;
      const waited = format.seconds((Date.now() - began) / 1e3);
      const line = Array.isArray(data.line) ? data.line : [];
      const mine = line.find((w) => w.pid === process.ppid || w.pid === child.pid);
      const place = mine ? `, place ${mine.place} of ${line.length} in line` : "";
      runner.info(`waiting ${waited} for '${name}'${place}: ${format.holders(data)}`);
    } finally {
      polling = false;
    }
  };
  const onEvent = (event) => {
    if (event.event === "contended" && ticker === null) {
      runner.info(event.message);
      progress();
      ticker = setInterval(progress, PROGRESS_MS);
    } else if (event.level === "warning" && event.event !== "busy") {
      warnings.push(event);
    }
  };
  const warnings = [];
  const done = await awsflock.run(bin, args, env, { onEvent, started: (c) => child = c });
  if (ticker !== null) clearInterval(ticker);
  const waitedS = (Date.now() - began) / 1e3;
  runner.setOutput("waited-seconds", waitedS.toFixed(1));
  runner.setOutput("holder", format.holderJson(holder));
  const lease = leaseIn(done.stdout);
  if (lease) {
    runner.saveState("lease-id", lease.lease_id);
    runner.saveState("acquired-at", String(Date.now()));
    runner.mask(lease.lease_id);
  }
  for (const event of warnings) {
    (cancelled ? runner.info : runner.warning)(event.message);
  }
  if (lease && (cancelled || done.code !== 0)) {
    runner.setOutput("acquired", "false");
    if (cancelled) {
      runner.info(`cancelled just as '${name}' was granted: the post step gives it back`);
    } else {
      runner.error(`'${name}' was granted, then awsflock failed: ${lastError(done)} (the post step gives it back)`);
    }
    return 1;
  }
  if (!lease) {
    runner.setOutput("acquired", "false");
    if (cancelled || done.code === 130) {
      runner.info(`cancelled while waiting for '${name}': the lock was not taken`);
    } else if (done.code === 3) {
      const busy = done.events.find((e) => e.event === "busy");
      const now = busy ? busy.message : `lock '${name}' stayed held`;
      runner.error(`gave up waiting for '${name}' after ${format.seconds(waitedS)}: ${now}`);
    } else {
      runner.error(`could not take '${name}': ${lastError(done)}`);
    }
    return 1;
  }
  const granted = done.events.find((e) => e.event === "acquired") || {};
  const token = String(lease.fencing_token);
  runner.setOutput("acquired", "true");
  runner.setOutput("fencing-token", token);
  runner.exportVariable("AWSFLOCK_LOCK_ID", name);
  runner.exportVariable("AWSFLOCK_FENCING_TOKEN", token);
  if (lease.slot !== void 0 && lease.slot !== null) {
    runner.setOutput("slot", String(lease.slot));
    runner.exportVariable("AWSFLOCK_SLOT", String(lease.slot));
  }
  const slot = lease.slot === void 0 || lease.slot === null ? "" : `, slot ${lease.slot}`;
  runner.info(
    `acquired '${name}'${slot} (fencing token ${token}) after ${format.seconds(waitedS)}; held for the rest of the job (renewed every third of ${inputs.lease})`
  );
  summarise(inputs, { token, slot, waitedS, holder, granted });
  return 0;
}
function leaseIn(stdout) {
  try {
    const lease = JSON.parse(stdout);
    return lease && typeof lease.lease_id === "string" && lease.lease_id ? lease : null;
  } catch {
    return null;
  }
}
function summarise(inputs, { token, slot, waitedS, holder, granted }) {
  const cell = (text) => String(text).replace(/[\r\n]+/g, " ").replace(/\|/g, "\\|");
  const rows = [
    ["Fencing token", `\`${token}\`${slot}`],
    ["Waited", format.seconds(waitedS)]
  ];
  if (granted.handoff_s !== void 0 && granted.handoff_s !== null) {
    rows.push(["Hand-off", `at most ${format.seconds(granted.handoff_s)} after the lock was last seen held`]);
  }
  rows.push(["Held when this job began waiting", holder ? format.holders(holder) : "free"]);
  const table = rows.map(([k, v]) => `| ${k} | ${cell(v)} |`).join("\n");
  runner.summary(`### awsflock: \`${inputs.name}\` held by this job

| | |
|---|---|
${table}
`);
}
async function main() {
  const inputs = readInputs();
  const bin = awsflock.ensure(inputs);
  const env = awsflock.storeEnv(inputs);
  runner.saveState("name", inputs.name);
  runner.saveState("bin", bin);
  runner.saveState("env", JSON.stringify(env));
  return inputs.mode === "check" ? check(inputs, bin, env) : lock(inputs, bin, env);
}
main().then(
  // exitCode, not exit(): output still queued for a pipe (macOS) is written first.
  (code) => process.exitCode = code,
  (err) => {
    runner.error(err instanceof runner.UsageError ? err.message : `awsflock action: ${err.message}`);
    process.exitCode = 1;
  }
);
