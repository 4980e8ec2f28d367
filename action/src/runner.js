// @ts-check
// What a JavaScript action exchanges with the GitHub Actions runner: inputs from INPUT_*
// variables, outputs, state, environment and PATH through the files the runner names, the
// job summary, and workflow commands (::error:: and friends) on stdout.
"use strict";

const crypto = require("node:crypto");
const fs = require("node:fs");
const os = require("node:os");

/** An input as the runner passes it: INPUT_ and the name upper-cased, spaces as "_".
 * @param {string} name */
function input(name) {
  const key = `INPUT_${name.replace(/ /g, "_").toUpperCase()}`;
  return (process.env[key] || "").trim();
}

/** A true/false input ("" is false); anything else is a usage error.
 * @param {string} name */
function flag(name) {
  const value = input(name).toLowerCase();
  if (["true", "yes", "on", "1"].includes(value)) return true;
  if (["false", "no", "off", "0", ""].includes(value)) return false;
  throw new UsageError(`input ${name} must be true or false, not "${input(name)}"`);
}

/** A mistake in the workflow's inputs: said as it is, without "awsflock action:". */
class UsageError extends Error {}

/** Appends NAME<<DELIMITER, the value, DELIMITER to the file the runner names in `variable`
 * (the multi-line form: a value may hold anything but the delimiter, which is random).
 * @param {"GITHUB_OUTPUT" | "GITHUB_STATE" | "GITHUB_ENV"} variable
 * @param {string} name
 * @param {unknown} value */
function appendTo(variable, name, value) {
  const file = process.env[variable];
  const text = String(value);
  if (!file) {
    // Outside a runner (or an old one): the deprecated command form still works.
    /** @type {Record<string, string>} */
    const commands = { GITHUB_OUTPUT: "set-output", GITHUB_STATE: "save-state" };
    const command = commands[variable];
    if (command) process.stdout.write(`::${command} name=${name}::${escape(text)}${os.EOL}`);
    return;
  }
  const delimiter = `awsflock_${crypto.randomUUID()}`;
  if (name.includes(delimiter) || text.includes(delimiter)) throw new Error("delimiter clash");
  fs.appendFileSync(file, `${name}<<${delimiter}${os.EOL}${text}${os.EOL}${delimiter}${os.EOL}`);
}

/** @param {string} name @param {unknown} value */
const setOutput = (name, value) => appendTo("GITHUB_OUTPUT", name, value);
/** @param {string} name @param {unknown} value */
const saveState = (name, value) => appendTo("GITHUB_STATE", name, value);
/** @param {string} name @param {unknown} value */
const exportVariable = (name, value) => {
  process.env[name] = String(value);
  appendTo("GITHUB_ENV", name, value);
};
/** What `main` saved for `post` (the runner gives it as STATE_name).
 * @param {string} name */
const state = (name) => process.env[`STATE_${name}`] || "";

/** @param {string} dir */
function addPath(dir) {
  process.env.PATH = `${dir}${require("node:path").delimiter}${process.env.PATH || ""}`;
  if (process.env.GITHUB_PATH) fs.appendFileSync(process.env.GITHUB_PATH, `${dir}${os.EOL}`);
}

/** @param {string} markdown */
function summary(markdown) {
  if (process.env.GITHUB_STEP_SUMMARY) {
    fs.appendFileSync(process.env.GITHUB_STEP_SUMMARY, markdown + os.EOL);
  }
}

/** A workflow command's data, escaped as the runner reads it.
 * @param {unknown} text */
function escape(text) {
  return String(text).replace(/%/g, "%25").replace(/\r/g, "%0D").replace(/\n/g, "%0A");
}

/** @param {string} name @param {unknown} text */
const command = (name, text) => process.stdout.write(`::${name}::${escape(text)}${os.EOL}`);
/** One plain log line. Its text may hold what another job wrote (a holder's owner): a line
 * break in it would start a line of its own, which the runner could take for a workflow
 * command (::stop-commands::, ::save-state::), so breaks become spaces, and a line that would
 * start with "::" starts with a space.
 * @param {unknown} text */
const info = (text) => {
  const line = String(text).replace(/[\r\n]+/g, " ");
  process.stdout.write(`${line.startsWith("::") ? " " : ""}${line}${os.EOL}`);
};
/** @param {unknown} text */
const warning = (text) => command("warning", text);
/** @param {unknown} text */
const error = (text) => command("error", text);
/** @param {string} secret */
const mask = (secret) => command("add-mask", secret);

module.exports = {
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
  warning,
};
