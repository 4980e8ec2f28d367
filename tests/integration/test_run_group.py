"""`awsflock run` holds the lock until CMD and every process left in its process group have
exited (a script's background jobs), as flock(1) holds it while a child has the descriptor.

Real processes against moto's server (what is tested is processes, not a store). The test says
when a background child may end by creating a file it waits for, never by timing.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import termios
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.checks import wait_for
from tests.integration.conftest import BIN, Cli


@pytest.fixture(scope="module")
def awsflock(moto_server) -> Cli:
    cli = Cli(moto_server.url, "run-group")
    assert cli("table-create", "-q").returncode == 0
    return cli


@pytest.fixture
def lock_name() -> str:
    return "group-" + uuid.uuid4().hex[:10]


@pytest.fixture
def pids(tmp_path) -> Iterator[list[int]]:
    """Pids of background children a test starts: at its end, whatever happened, every worker
    is told to go (also one whose pid the test never read) and those named here are killed."""
    started: list[int] = []
    yield started
    for pidfile in tmp_path.glob("*.pid"):
        pidfile.with_suffix(".go").touch()
    for pid in started:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Runs (a zombie, exited but not reaped, counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _until(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


class Running:
    """``awsflock run`` started in the background, its stderr read as it comes."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def said(self, text: str) -> None:
        """Wait (bounded) until a line of its stderr contains ``text``."""
        try:
            _until(lambda: any(text in line for line in self.lines))
        except AssertionError:
            raise AssertionError(f"run never said {text!r}: {self.lines}") from None

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        """Its exit status, stdout and stderr."""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # what the test started is killed by the ``pids`` fixture
            self.proc.wait(timeout)
            raise
        self._reader.join(timeout)
        out = self.proc.stdout.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code, out, "".join(self.lines)


def _state(awsflock: Cli, lock: str) -> str:
    return json.loads(awsflock("status", lock, "--json").stdout)["state"]


def _worker(tmp: Path, name: str = "bg", trap: str = "") -> str:
    """A shell snippet for a background child: writes its pid to tmp/NAME.pid, runs until the
    test creates tmp/NAME.go, then writes tmp/NAME.done. It lets go of the command's output, so
    that reading that to its end does not wait for the child."""
    go, pid, done = tmp / f"{name}.go", tmp / f"{name}.pid", tmp / f"{name}.done"
    return (
        f"exec </dev/null >/dev/null 2>&1; {trap} echo $$ > {pid}; "
        f"until [ -e {go} ]; do sleep 0.05; done; echo yes > {done}"
    )


def _started(tmp: Path, pids: list[int], name: str = "bg") -> int:
    pid = int(wait_for(tmp / f"{name}.pid"))
    pids.append(pid)
    return pid


def test_run_keeps_the_lock_until_a_background_child_of_the_command_exits(
    awsflock: Cli, lock_name, tmp_path, pids
):
    script = f"sh -c '{_worker(tmp_path)}' & echo started"
    run = Running(awsflock.popen("run", lock_name, "-c", script))
    child = _started(tmp_path, pids)
    # The command has exited: run says so, and that it holds the lock for what is left.
    run.said("in its process group: holding")
    assert f"{child} sh" in run.lines[0], run.lines
    assert run.proc.poll() is None, "run exited while the command's background child ran"
    assert _state(awsflock, lock_name) == "held"
    (tmp_path / "bg.go").touch()
    code, out, err = run.finish()
    assert code == 0, err
    assert out == "started\n"
    assert (tmp_path / "bg.done").exists(), "run exited before the background child"
    assert "--hold-until command" in err and len(err.splitlines()) == 1, err
    assert _state(awsflock, lock_name) == "free"


def test_the_command_status_passes_through_once_the_group_is_empty(
    awsflock: Cli, lock_name, tmp_path, pids
):
    script = f"sh -c '{_worker(tmp_path)}' & exit 3"
    proc = awsflock.popen("run", lock_name, "-c", script)
    _started(tmp_path, pids)
    (tmp_path / "bg.go").touch()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    assert (tmp_path / "bg.done").exists()


def test_a_daemon_that_calls_setsid_is_not_waited_for(awsflock: Cli, lock_name, tmp_path, pids):
    # Like a daemon, it lets go of the command's output too. The command exits once the daemon
    # runs in its own session (its pid file is written there): before that, the child setsid
    # forks is still in the command's group, and run rightly waits for it (a CI failure).
    pid = tmp_path / "bg.pid"
    script = (
        f"setsid -f sh -c '{_worker(tmp_path)}' </dev/null >/dev/null 2>&1; "
        f"until [ -e {pid} ]; do sleep 0.02; done; echo started"
    )
    result = awsflock("run", lock_name, "-c", script, timeout=30)
    daemon = _started(tmp_path, pids)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert _alive(daemon), "the daemon had left the group and should have been left alone"
    assert _state(awsflock, lock_name) == "free"
    (tmp_path / "bg.go").touch()


#: A process that leaves a zombie behind in the command's group: it forks a child that exits at
#: once, moves to a session of its own, and never reaps the child (as a container's pid 1 that
#: reaps nothing leaves orphans).
ZOMBIE_MAKER = """
import os, sys, time
devnull = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(devnull, fd)
child = os.fork()
if child == 0:
    os._exit(0)
os.setsid()
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {child}")
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
"""


def test_a_zombie_left_in_the_group_does_not_keep_the_lock(
    awsflock: Cli, lock_name, tmp_path, pids
):
    pidfile, go = tmp_path / "pids", tmp_path / "go"
    script = f"{sys.executable} -c '{ZOMBIE_MAKER}' {pidfile} {go} &"
    run = Running(awsflock.popen("run", lock_name, "-c", script))
    parent, zombie = map(int, wait_for(pidfile).split())
    pids.append(parent)
    try:
        code, _, err = run.finish(timeout=20)
        state = Path(f"/proc/{zombie}/stat").read_text().rsplit(")", 1)[1].split()[0]
    finally:
        go.touch()
    assert code == 0, err
    assert state == "Z", "the test's zombie was not one"
    assert _state(awsflock, lock_name) == "free"


def test_hold_until_command_releases_when_the_command_exits(
    awsflock: Cli, lock_name, tmp_path, pids
):
    script = f"sh -c '{_worker(tmp_path)}' & echo started"
    result = awsflock("run", lock_name, "--hold-until", "command", "-c", script, timeout=30)
    child = _started(tmp_path, pids)
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == ("started\n", "")
    assert _alive(child), "the background child was stopped"
    assert _state(awsflock, lock_name) == "free"
    (tmp_path / "bg.go").touch()


def test_a_lost_lease_kills_a_background_child_before_run_exits(
    awsflock: Cli, lock_name, tmp_path, pids
):
    # The child ignores TERM, so only the KILL after --kill-after ends it.
    worker = _worker(tmp_path, trap='trap "" TERM;')
    proc = awsflock.popen("run", lock_name, "--lease-duration", "3s", "-c", f"sh -c '{worker}' &")
    run = Running(proc)
    child = _started(tmp_path, pids)
    run.said("in its process group: holding")  # the command itself has exited
    forced = awsflock("force-release", lock_name, "--reason", "test", "--yes")
    assert forced.returncode == 0, forced.stderr
    code, _, err = run.finish()
    assert code == 124, err
    assert not _alive(child), "run exited while a process of the lost lease's work ran"
    assert not (tmp_path / "bg.done").exists()
    assert "lease was lost" in err and "force-released" in err
    # Issue 38 (14): the loss line named the LEASE_ID, a secret, in CI logs.
    assert not re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-", err), err


def test_a_signal_to_run_stops_what_the_command_left_behind(
    awsflock: Cli, lock_name, tmp_path, pids
):
    # A CI job is cancelled (TERM to awsflock) while only the background child is left.
    worker = _worker(tmp_path, trap='trap "" INT;')
    run = Running(awsflock.popen("run", lock_name, "-c", f"sh -c '{worker}' & echo up"))
    child = _started(tmp_path, pids)
    run.said("in its process group: holding")
    run.proc.send_signal(signal.SIGTERM)
    code, _, err = run.finish()
    # The command had exited 0, but the work it left was cut short: not a success.
    assert code == 128 + signal.SIGTERM, err
    assert not _alive(child)
    assert not (tmp_path / "bg.done").exists()
    assert _state(awsflock, lock_name) == "free"


def test_a_signal_to_run_keeps_the_command_s_own_failure_status(
    awsflock: Cli, lock_name, tmp_path, pids
):
    # SPEC audit: the command had exited 9 and left a child; TERM to awsflock stopped the
    # child, and run exited 143, hiding the command's own failure.
    worker = _worker(tmp_path, trap='trap "" INT;')
    run = Running(awsflock.popen("run", lock_name, "-c", f"sh -c '{worker}' & echo up; exit 9"))
    child = _started(tmp_path, pids)
    run.said("in its process group: holding")
    run.proc.send_signal(signal.SIGTERM)
    code, _, err = run.finish()
    assert code == 9, err
    assert not _alive(child)
    assert _state(awsflock, lock_name) == "free"


def test_ctrl_c_at_a_terminal_stops_the_background_child_and_releases(
    awsflock: Cli, lock_name, tmp_path, pids
):
    """awsflock run in the foreground of a real terminal (a pty, as its controlling terminal):
    Ctrl-C reaches the command's group; the command dies of it, the background job (which a
    non-interactive shell starts with INT ignored) is stopped, and the prompt comes back."""
    script = f"bash -c '{_worker(tmp_path)}' & echo up > {tmp_path}/up; wait"
    master, slave = os.openpty()
    proc = None

    def controlling_terminal() -> None:  # runs in the child after setsid
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        proc = subprocess.Popen(
            [str(BIN), "run", lock_name, "--", "bash", "-c", script],
            stdin=slave,
            stdout=slave,
            stderr=subprocess.PIPE,
            text=True,
            env=awsflock.env(),
            start_new_session=True,
            preexec_fn=controlling_terminal,
        )
        os.close(slave)
        child = _started(tmp_path, pids)
        wait_for(tmp_path / "up")
        os.write(master, b"\x03")  # Ctrl-C
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(master)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, err
    assert not _alive(child), "a process of the interrupted command was left running"
    assert "interrupted (status 130)" in err
    assert _state(awsflock, lock_name) == "free"
