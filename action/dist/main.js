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

// src/format.js
var require_format = __commonJS({
  "src/format.js"(exports2, module2) {
    "use strict";
    var output = require_output();
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
    function holder(status) {
      if (!status || status.state === "free") return "nobody";
      const who = status.owner || "unknown owner";
      const where = status.ci_url ? ` (${status.ci_url})` : status.host ? ` (host ${status.host})` : "";
      const since = status.held_for_s === null || status.held_for_s === void 0 ? "" : `, held for ${seconds(status.held_for_s)}`;
      const left = status.state === "expired" ? `, lease expired (free in ${seconds(status.reclaimable_in_s)})` : `, lease expires in ${seconds(status.expires_in_s)}`;
      return who + where + since + left;
    }
    function holders(status) {
      if (!status || !Array.isArray(status.slot_states)) return holder(status);
      const held = status.slot_states.filter((s) => s.state === "held");
      if (!held.length) return "no slot held";
      const each = held.map((s) => `slot ${s.slot}: ${holder(s)}`).join("; ");
      return `${held.length} of ${status.slots} slots held (${each})`;
    }
    function holderJson(status) {
      if (!status || status.state === "free") return "";
      const keep = output.HOLDER_KEEPS;
      if (Array.isArray(status.slot_states)) {
        const held = status.slot_states.filter((s) => s.state === "held");
        return JSON.stringify({ slots: held.map((s) => pick(s, ["slot", ...keep])) });
      }
      return JSON.stringify(pick(status, keep));
    }
    function pick(object, keys) {
      const out = {};
      for (const key of keys) if (object[key] !== void 0 && object[key] !== null) out[key] = object[key];
      return out;
    }
    module2.exports = { holder, holderJson, holders, seconds };
  }
});

// src/report.js
var require_report = __commonJS({
  "src/report.js"(exports2, module2) {
    "use strict";
    var format = require_format();
    var output = require_output();
    var oneLine = (text) => String(text).replace(/[\r\n]+/g, " ");
    var named = (names) => names.map((n) => `'${n}'`).join(", ");
    var titled = (names) => names.map((n) => `\`${n}\``).join(", ");
    function checked(names, look, held) {
      const one = names.length === 1;
      const which = one ? "" : `'${look.name}' `;
      const state = held ? `${which}held: ${oneLine(format.holders(look.data))}` : "free";
      const said = one ? `lock ${named(names)} is ${state}` : `locks ${named(names)}: ${held ? state : "all free"}`;
      const summary = `### awsflock: ${titled(names)} ${one ? "is" : "are"} ${held ? "held" : "free"}

${said}
`;
      return { said, summary };
    }
    function place(data, pids) {
      const line = Array.isArray(data.line) ? data.line : [];
      const mine = line.find((w) => w.pid !== null && w.pid !== void 0 && pids.includes(w.pid));
      return mine ? `, place ${mine.place} of ${line.length} in line` : "";
    }
    function waiting(names, look, waitedS, pids) {
      const waited = format.seconds(waitedS);
      const which = names.length === 1 ? "" : ` '${look.name}' held by`;
      return `waiting ${waited} for ${named(names)}${place(look.data, pids)}:${which} ${format.holders(look.data)}`;
    }
    function failure(names, { lease, cancelled, done, waitedS }) {
      const name = named(names);
      if (lease && cancelled) {
        return { level: "info", text: `cancelled just as ${name} was granted: the post step gives it back` };
      }
      if (lease && done.code !== 0) {
        const why = output.lastError(done);
        return { level: "error", text: `${name} was granted, then awsflock failed: ${why} (the post step gives it back)` };
      }
      if (lease) return null;
      if (cancelled || done.code === 130) {
        return { level: "info", text: `cancelled while waiting for ${name}: the lock was not taken` };
      }
      if (done.code === 3) {
        const busy = done.events.find((e) => e.event === "busy");
        const now = busy ? busy.message : `lock ${name} stayed held`;
        return { level: "error", text: `gave up waiting for ${name} after ${format.seconds(waitedS)}: ${now}` };
      }
      return { level: "error", text: `could not take ${name}: ${output.lastError(done)}` };
    }
    function slotOf(lease) {
      return lease.slot === void 0 || lease.slot === null ? "" : `, slot ${lease.slot}`;
    }
    function tokensOf(names, lease) {
      if (lease.fencing_tokens) return lease.fencing_tokens;
      return { [names[0]]: Number(lease.fencing_token) };
    }
    function tokensSaid(names, lease) {
      const tokens = tokensOf(names, lease);
      if (names.length === 1) return `fencing token ${tokens[names[0]]}`;
      return `fencing tokens ${names.map((n) => `${n} ${tokens[n]}`).join(", ")}`;
    }
    function acquired(names, lease, waitedS, leaseInput) {
      return `acquired ${named(names)}${slotOf(lease)} (${tokensSaid(names, lease)}) after ${format.seconds(waitedS)}; held for the rest of the job (renewed every third of ${leaseInput})`;
    }
    function heldSummary(names, { lease, waitedS, holder, granted }) {
      const cell = (text) => oneLine(text).replace(/\|/g, "\\|");
      const tokens = tokensOf(names, lease);
      const rows = [
        names.length === 1 ? ["Fencing token", `\`${tokens[names[0]]}\`${slotOf(lease)}`] : ["Fencing tokens", names.map((n) => `${n} \`${tokens[n]}\``).join(", ")],
        ["Waited", format.seconds(waitedS)]
      ];
      const before = previousOf(names, lease);
      if (before) rows.push([names.length === 1 ? "Lease before" : "Leases before", before]);
      const handoff = granted ? granted.handoff_s : void 0;
      if (handoff !== void 0 && handoff !== null) {
        rows.push(["Hand-off", `at most ${format.seconds(handoff)} after the lock was last seen held`]);
      }
      rows.push(["Held when this job began waiting", holder ? format.holders(holder) : "free"]);
      const table = rows.map(([k, v]) => `| ${k} | ${cell(v)} |`).join("\n");
      return `### awsflock: ${titled(names)} held by this job

| | |
|---|---|
${table}
`;
    }
    function previousOf(names, lease) {
      const given = lease.previous;
      if (!given) return "";
      const each = "how" in given ? { [names[0]]: (
        /** @type {Previous} */
        given
      ) } : (
        /** @type {Record<string, Previous>} */
        given
      );
      const said = names.filter((n) => each[n]).map((n) => [n, beforeSaid(each[n])]);
      return names.length === 1 ? (said[0] || ["", ""])[1] : said.map(([n, s]) => `${n}: ${s}`).join("; ");
    }
    function beforeSaid(p) {
      if (p.how !== "expired" && p.how !== "forced") return p.how;
      const where = [p.host && p.host !== p.owner ? `host ${p.host}` : "", p.ci_url || ""].filter(Boolean);
      const holder = (p.owner || "unknown owner") + (where.length ? ` (${where.join(", ")})` : "");
      const when = typeof p.ended_at === "number" ? ` at ${new Date(p.ended_at * 1e3).toISOString().replace(/\.\d+Z$/, "Z")}` : "";
      if (p.how === "forced") return `**not released**: force-released${when} by ${p.forced_by || "an operator"} (held by ${holder})`;
      return `**not released** by ${holder}: its lease ran out${when}`;
    }
    module2.exports = { acquired, checked, failure, heldSummary, named, place, slotOf, tokensOf, waiting };
  }
});

// src/check.js
var require_check = __commonJS({
  "src/check.js"(exports2, module2) {
    "use strict";
    var awsflock2 = require_awsflock();
    var format = require_format();
    var report = require_report();
    var runner2 = require_runner();
    async function check2(inputs, bin, env) {
      let look = null;
      let held = false;
      for (const name of inputs.names) {
        const { data, error, code } = await awsflock2.status(bin, name, env);
        if (error) throw new Error(`could not tell whether '${name}' is held: ${error}`);
        if (code === 0) {
          look = { name, data };
          held = true;
          break;
        }
        look = look || { name, data };
      }
      if (look === null) throw new Error("no lock to look at");
      runner2.setOutput("acquired", "false");
      runner2.setOutput("held", String(held));
      runner2.setOutput("holder", format.holderJson(look.data));
      const { said, summary } = report.checked(inputs.names, look, held);
      runner2.summary(summary);
      if (held && inputs.failIfHeld) {
        runner2.error(`${said} (mode: check fails while it is held)`);
        return 1;
      }
      runner2.info(said);
      return 0;
    }
    module2.exports = { check: check2 };
  }
});

// src/inputs.js
var require_inputs = __commonJS({
  "src/inputs.js"(exports2, module2) {
    "use strict";
    var runner2 = require_runner();
    function readInputs2() {
      const names = namesOf(runner2.input("name"), runner2.input("names"));
      const inputs = {
        name: names.map((n) => `'${n}'`).join(", "),
        names,
        mode: runner2.input("mode") || "lock",
        failIfHeld: runner2.input("fail-if-held") === "" ? true : runner2.flag("fail-if-held"),
        store: runner2.input("store"),
        table: runner2.input("table"),
        region: runner2.input("region"),
        lease: runner2.input("lease") || "60s",
        wait: runner2.input("wait") || "30m",
        fair: runner2.input("fair") === "" ? true : runner2.flag("fair"),
        shared: runner2.input("shared") === "" ? false : runner2.flag("shared"),
        slots: runner2.input("slots"),
        owner: runner2.input("owner"),
        version: runner2.input("version")
      };
      if (!["lock", "check"].includes(inputs.mode)) {
        throw new runner2.UsageError(`input mode must be lock or check, not "${inputs.mode}"`);
      }
      if (inputs.slots && !/^[1-9][0-9]*$/.test(inputs.slots)) {
        throw new runner2.UsageError(`input slots must be a whole number of slots, not "${inputs.slots}"`);
      }
      if (inputs.shared && inputs.slots) {
        throw new runner2.UsageError("input shared takes a plain lock: drop slots, or shared");
      }
      if (names.length > 1 && (inputs.slots || inputs.shared)) {
        const which = inputs.slots ? "slots" : "shared";
        throw new runner2.UsageError(`input ${which} takes one lock: give name, or drop ${which}`);
      }
      return inputs;
    }
    function namesOf(name, names) {
      const several = names.split(/\r?\n/).map((n) => n.trim()).filter(Boolean);
      if (name && several.length) {
        throw new runner2.UsageError("give input name (one lock) or names (several), not both");
      }
      if (name) return [name];
      if (!several.length) {
        throw new runner2.UsageError("input name is required: the lock's name (or names: several, one per line)");
      }
      return several;
    }
    function defaultOwner(e = process.env) {
      const where = [e.GITHUB_REPOSITORY, e.GITHUB_WORKFLOW].filter(Boolean).join(": ");
      const job = e.GITHUB_JOB ? ` / ${e.GITHUB_JOB}` : "";
      const who = [e.GITHUB_ACTOR, e.GITHUB_REF_NAME].filter(Boolean).join(", ");
      const owner = (where || "github-actions") + job + (who ? ` (${who})` : "");
      return owner.slice(0, 200);
    }
    function acquireArgs(inputs, whilePid, env = process.env) {
      const args = ["acquire", "--json", "--while-pid", String(whilePid)];
      args.push("--lease-duration", inputs.lease, "--wait-time", inputs.wait);
      args.push("--owner", inputs.owner || defaultOwner(env));
      if (inputs.shared) args.push("--shared");
      else if (inputs.fair && inputs.names.length === 1) args.push("--fair");
      if (inputs.slots) args.push("--slots", inputs.slots);
      args.push("--", ...inputs.names);
      return args;
    }
    module2.exports = { acquireArgs, defaultOwner, readInputs: readInputs2 };
  }
});

// src/lock.js
var require_lock = __commonJS({
  "src/lock.js"(exports2, module2) {
    "use strict";
    var awsflock2 = require_awsflock();
    var format = require_format();
    var { acquireArgs } = require_inputs();
    var output = require_output();
    var report = require_report();
    var runner2 = require_runner();
    var PROGRESS_MS = 5e3;
    var Cancel = class {
      constructor() {
        this.signal = "";
        this.child = null;
        process.on("SIGINT", () => this.receive("SIGINT"));
        process.on("SIGTERM", () => this.receive("SIGTERM"));
      }
      /** @param {string} signal */
      receive(signal) {
        this.signal = this.signal || signal;
        if (this.child && this.child.exitCode === null) this.child.kill("SIGINT");
      }
    };
    var Watch = class {
      /** @param {string[]} names @param {string} bin @param {Record<string, string>} env */
      constructor(names, bin, env) {
        this.names = names;
        this.bin = bin;
        this.env = env;
        this.began = Date.now();
        this.child = null;
        this.holder = null;
        this.warnings = [];
        this.polling = false;
        this.ticker = null;
      }
      /** @param {AwsflockEvent} event */
      onEvent(event) {
        if (event.event === "contended" && this.ticker === null) {
          runner2.info(event.message);
          this.progress();
          this.ticker = setInterval(() => this.progress(), PROGRESS_MS);
        } else if (event.level === "warning" && event.event !== "busy") {
          this.warnings.push(event);
        }
      }
      /** A `status` read of each lock until one is held, said as a line (none once awsflock
       * has ended, or while one is out). */
      async progress() {
        const child = this.child;
        if (this.polling || !child || child.exitCode !== null) return;
        this.polling = true;
        try {
          const look = await firstHeld(this.bin, this.names, this.env);
          if (!look || child.exitCode !== null) return;
          if (this.holder === null) this.holder = look.data;
          const pids = [process.ppid, child.pid].filter((pid) => pid !== void 0);
          runner2.info(report.waiting(this.names, look, (Date.now() - this.began) / 1e3, pids));
        } finally {
          this.polling = false;
        }
      }
      stop() {
        if (this.ticker !== null) clearInterval(this.ticker);
      }
    };
    async function firstHeld(bin, names, env) {
      let first = null;
      for (const name of names) {
        const { data } = await awsflock2.status(bin, name, env);
        if (!data) continue;
        if (data.state !== "free") return { name, data };
        first = first || { name, data };
      }
      return first;
    }
    async function lock2(inputs, bin, env) {
      const cancel = new Cancel();
      const watch = new Watch(inputs.names, bin, env);
      const done = await awsflock2.run(bin, acquireArgs(inputs, process.ppid), env, {
        onEvent: (event) => watch.onEvent(event),
        started: (child) => cancel.child = watch.child = child
      });
      watch.stop();
      const waitedS = (Date.now() - watch.began) / 1e3;
      runner2.setOutput("waited-seconds", waitedS.toFixed(1));
      runner2.setOutput("holder", format.holderJson(watch.holder));
      const lease = output.leaseIn(done.stdout);
      if (lease) keep(lease);
      for (const event of watch.warnings) {
        (cancel.signal ? runner2.info : runner2.warning)(event.message);
      }
      const failed = report.failure(inputs.names, { lease, cancelled: cancel.signal, done, waitedS });
      if (failed || !lease) {
        runner2.setOutput("acquired", "false");
        if (failed) (failed.level === "info" ? runner2.info : runner2.error)(failed.text);
        return 1;
      }
      held(inputs, lease, done, { waitedS, holder: watch.holder });
      return 0;
    }
    function keep(lease) {
      runner2.saveState("lease-id", lease.lease_id);
      runner2.saveState("acquired-at", String(Date.now()));
      runner2.mask(lease.lease_id);
    }
    function held(inputs, lease, done, { waitedS, holder }) {
      const names = inputs.names;
      const tokens = report.tokensOf(names, lease);
      runner2.setOutput("acquired", "true");
      runner2.setOutput("fencing-tokens", JSON.stringify(tokens));
      runner2.exportVariable("AWSFLOCK_LOCK_ID", names.join("\n"));
      runner2.exportVariable("AWSFLOCK_LOCKS", String(names.length));
      names.forEach((name, i) => {
        runner2.exportVariable(`AWSFLOCK_LOCK_ID_${i + 1}`, name);
        runner2.exportVariable(`AWSFLOCK_FENCING_TOKEN_${i + 1}`, String(tokens[name]));
      });
      if (names.length === 1) {
        runner2.setOutput("fencing-token", String(tokens[names[0]]));
        runner2.exportVariable("AWSFLOCK_FENCING_TOKEN", String(tokens[names[0]]));
      }
      runner2.exportVariable("AWSFLOCK_SHARED", inputs.shared ? "1" : "0");
      if (lease.slot !== void 0 && lease.slot !== null) {
        runner2.setOutput("slot", String(lease.slot));
        runner2.exportVariable("AWSFLOCK_SLOT", String(lease.slot));
      }
      runner2.info(report.acquired(names, lease, waitedS, inputs.lease));
      const granted = done.events.find((e) => e.event === "acquired");
      runner2.summary(report.heldSummary(names, { lease, waitedS, holder, granted }));
    }
    module2.exports = { lock: lock2 };
  }
});

// src/main.js
var awsflock = require_awsflock();
var { check } = require_check();
var { readInputs } = require_inputs();
var { lock } = require_lock();
var runner = require_runner();
async function main() {
  const inputs = readInputs();
  const bin = awsflock.ensure(inputs);
  const env = awsflock.storeEnv(inputs);
  runner.saveState("name", inputs.name);
  runner.saveState("names", JSON.stringify(inputs.names));
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
