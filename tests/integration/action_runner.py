"""A stand-in for the GitHub Actions runner, enough to run the action as it runs it.

A ``Job`` has a worker process (the runner's Runner.Worker: every step's parent, living as
long as the job) that starts each step as a child: ``node action/dist/main.js``, a shell step,
``node action/dist/post.js``. Each step gets the runner's variables and files: ``INPUT_*``
(with action.yml's defaults for inputs not given), ``GITHUB_OUTPUT``, ``GITHUB_STATE``,
``GITHUB_ENV``, ``GITHUB_PATH``, ``GITHUB_STEP_SUMMARY``; after a step the job reads them back
as the runner does (outputs, state for ``post`` as ``STATE_*``, variables and PATH for later
steps). ``cancel`` signals a step as the runner cancels one: SIGINT, SIGTERM 7.5 s later, then
SIGKILL 2.5 s after that.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from awsflock.supervise.processes import alive  # a zombie step counts as gone

ROOT = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
MAIN = ROOT / "action" / "dist" / "main.js"
POST = ROOT / "action" / "dist" / "post.js"

#: The worker: starts a step when told (a JSON line on stdin), says its pid, and its exit code
#: when asked; it ends when its stdin closes (the job is over).
WORKER = r"""
import json, subprocess, sys
step = None
for line in sys.stdin:
    order = json.loads(line)
    if order["do"] == "start":
        log = open(order["log"], "ab")
        step = subprocess.Popen(order["argv"], env=order["env"], cwd=order["cwd"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        print(json.dumps({"pid": step.pid}), flush=True)
    elif order["do"] == "wait":
        print(json.dumps({"code": step.wait()}), flush=True)
"""


def input_defaults() -> dict[str, str]:
    return {name: str(spec.get("default", "")) for name, spec in ACTION["inputs"].items()}


def read_file_commands(path: Path) -> dict[str, str]:
    """NAME<<DELIMITER ... DELIMITER and NAME=VALUE entries, as the runner reads the files."""
    found: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        heredoc = re.fullmatch(r"([^=<]+)<<(.+)", line)
        if heredoc:
            name, delimiter = heredoc.groups()
            end = lines.index(delimiter, i + 1)
            found[name] = "\n".join(lines[i + 1 : end])
            i = end + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            found[name] = value
        i += 1
    return found


@dataclass
class Step:
    name: str
    pid: int
    log: Path
    files: dict[str, Path]
    code: int | None = None
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def summary(self) -> str:
        path = self.files["GITHUB_STEP_SUMMARY"]
        return path.read_text() if path.exists() else ""


class Job:
    """One job: its worker, its steps' files, and what the steps handed on."""

    def __init__(self, folder: Path, env: dict[str, str], inputs: dict[str, str], name: str):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.env = {
            **env,
            "GITHUB_ACTIONS": "true",
            "GITHUB_SERVER_URL": "https://github.example",
            "GITHUB_REPOSITORY": f"octo/{name}",
            "GITHUB_WORKFLOW": "Deploy",
            "GITHUB_JOB": name,
            "GITHUB_RUN_ID": str(uuid.uuid4().int % 10**9),
            "GITHUB_ACTOR": "mona",
            "GITHUB_REF_NAME": "main",
            "RUNNER_TEMP": str(folder / "temp"),
            "RUNNER_TOOL_CACHE": str(folder.parent / "tool-cache"),
        }
        (folder / "temp").mkdir(exist_ok=True)
        self.inputs = {**input_defaults(), **inputs}
        self.state: dict[str, str] = {}
        self.exported: dict[str, str] = {}
        self.paths: list[str] = []
        self.steps: list[Step] = []
        self.worker = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # the job's processes: killed together when the runner dies
        )

    @property
    def run_url(self) -> str:
        e = self.env
        return (
            f"{e['GITHUB_SERVER_URL']}/{e['GITHUB_REPOSITORY']}/actions/runs/{e['GITHUB_RUN_ID']}"
        )

    def _ask(self, order: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.worker.stdin is not None and self.worker.stdout is not None
        self.worker.stdin.write(json.dumps(order) + "\n")
        self.worker.stdin.flush()
        ready, _, _ = select.select([self.worker.stdout], [], [], timeout)
        assert ready, f"{self.name}: the worker did not answer {order['do']} in {timeout}s"
        return dict(json.loads(self.worker.stdout.readline()))

    def start(self, kind: str, script: str = "") -> Step:
        """Start a step: "main", "post" (the action's) or "run" (a shell step, ``script``)."""
        n = len(self.steps)
        files = {
            var: self.folder / f"{n}-{var.lower()}"
            for var in ("GITHUB_OUTPUT", "GITHUB_STATE", "GITHUB_ENV", "GITHUB_PATH")
        }
        files["GITHUB_STEP_SUMMARY"] = self.folder / f"{n}-summary.md"
        env = {**self.env, **self.exported, **{k: str(v) for k, v in files.items()}}
        env["PATH"] = os.pathsep.join([*reversed(self.paths), self.env["PATH"]])
        if kind in ("main", "post"):
            env.update({f"INPUT_{k.replace(' ', '_').upper()}": v for k, v in self.inputs.items()})
        if kind == "post":
            env.update({f"STATE_{k}": v for k, v in self.state.items()})
        argv = {
            "main": ["node", str(MAIN)],
            "post": ["node", str(POST)],
            "run": ["sh", "-c", script],
        }[kind]
        log = self.folder / f"{n}-{kind}.log"
        said = self._ask(
            {"do": "start", "argv": argv, "env": env, "cwd": str(self.folder), "log": str(log)}, 30
        )
        step = Step(kind, int(said["pid"]), log, files)
        self.steps.append(step)
        return step

    def finish(self, step: Step, timeout: float = 120) -> Step:
        """Wait for ``step`` to end, then take in what it wrote, as the runner does."""
        step.code = int(self._ask({"do": "wait"}, timeout)["code"])
        step.outputs = read_file_commands(step.files["GITHUB_OUTPUT"])
        if step.name == "main":
            self.state.update(read_file_commands(step.files["GITHUB_STATE"]))
        self.exported.update(read_file_commands(step.files["GITHUB_ENV"]))
        path = step.files["GITHUB_PATH"]
        if path.exists():
            self.paths += [p for p in path.read_text().splitlines() if p]
        return step

    def run(self, kind: str, script: str = "", timeout: float = 120) -> Step:
        return self.finish(self.start(kind, script), timeout)

    def cancel(self, step: Step) -> Step:
        """Cancel ``step`` as the runner does: SIGINT; SIGTERM after 7.5 s; SIGKILL of its
        tree 2.5 s after that."""
        for sig, grace in ((signal.SIGINT, 7.5), (signal.SIGTERM, 2.5), (signal.SIGKILL, 30)):
            tree = _tree(step.pid) if sig == signal.SIGKILL else [step.pid]
            try:
                for pid in tree:
                    os.kill(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and alive(step.pid):
                time.sleep(0.05)
            if not alive(step.pid):
                break
        return self.finish(step, 30)

    def end(self) -> None:
        """The job is over: the worker exits."""
        if self.worker.poll() is None:
            assert self.worker.stdin is not None
            self.worker.stdin.close()
            self.worker.wait(timeout=30)
        self._close()

    def die(self) -> None:
        """The runner dies: the worker and its steps are killed at once."""
        if self.worker.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait(timeout=30)
        self._close()

    def _close(self) -> None:
        for pipe in (self.worker.stdin, self.worker.stdout):
            if pipe is not None and not pipe.closed:
                with contextlib.suppress(OSError):
                    pipe.close()

    def logs(self) -> str:
        return "\n".join(f"--- {s.name} (exit {s.code})\n{s.text}" for s in self.steps)


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (by /proc's parent pids)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found
