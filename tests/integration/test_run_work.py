"""`awsflock run` follows its command's process group to the end: a relay of processes that fork
and exit at once is never taken for an empty group; if awsflock itself is killed, its guard
KILLs the group; once the command has exited, Ctrl-C reaches awsflock; a stopped command still
gets the signals sent to awsflock; what moves to a group of its own (GNU `timeout` without
`--foreground`) is not followed, as documented.

Real processes against moto's server; a background child ends when the test creates a file."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import termios

import pytest

from tests.integration.checks import wait_for
from tests.integration.conftest import BIN, Cli
from tests.integration.test_run_group import (
    Running,
    _alive,
    _started,
    _state,
    _until,
    _worker,
    awsflock,
    lock_name,
    pids,
)

__all__ = ["awsflock", "lock_name", "pids"]  # the fixtures, shared with test_run_group

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="follows work through /proc")


def test_timeout_in_the_foreground_is_waited_for_and_without_it_is_not(
    awsflock: Cli, lock_name, tmp_path, pids
):
    # GNU timeout moves itself and its command to a group of their own unless --foreground.
    worker = _worker(tmp_path)
    run = Running(
        awsflock.popen("run", lock_name, "-c", f"timeout --foreground 60 sh -c '{worker}' & exit 0")
    )
    child = _started(tmp_path, pids)
    run.said("in its process group: holding")
    assert _state(awsflock, lock_name) == "held" and _alive(child)
    (tmp_path / "bg.go").touch()
    code, _, err = run.finish()
    assert code == 0, err
    assert (tmp_path / "bg.done").exists() and _state(awsflock, lock_name) == "free"
    other = _worker(tmp_path, "own")
    script = f"timeout 60 sh -c '{other}' </dev/null >/dev/null 2>&1 & exit 0"
    gone = awsflock("run", lock_name, "-c", script)
    assert gone.returncode == 0 and _alive(_started(tmp_path, pids, "own"))
    assert _state(awsflock, lock_name) == "free"  # as the guide says: it left the group


def test_a_relay_of_processes_forking_and_exiting_is_followed_to_its_end(
    awsflock: Cli, lock_name, tmp_path, pids
):
    # Each process forks its successor and exits at once: the group is never empty, though a
    # pass over /proc may find only zombies or miss the newest member.
    relay = (
        "import os, sys, time\n"
        "end = time.monotonic() + 3\n"
        "while time.monotonic() < end:\n"
        "    if os.fork():\n"
        "        os._exit(0)\n"
        f"open({str(tmp_path / 'relay.done')!r}, 'w').write('done')\n"
    )
    done = awsflock("run", lock_name, "--", sys.executable, "-c", relay)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "relay.done").exists(), "run ended before the last of the relay"


def test_if_awsflock_is_killed_its_guard_kills_the_work(awsflock: Cli, lock_name, tmp_path, pids):
    # PR_SET_PDEATHSIG kills only the command itself; the guard kills what it started.
    worker = _worker(tmp_path)
    run = Running(awsflock.popen("run", lock_name, "-c", f"sh -c '{worker}' & wait"))
    child = _started(tmp_path, pids)
    run.proc.send_signal(signal.SIGKILL)
    run.finish()
    _until(lambda: not _alive(child))
    assert not (tmp_path / "bg.done").exists()


def test_ctrl_c_after_the_command_exited_stops_what_it_left(
    awsflock: Cli, lock_name, tmp_path, pids
):
    """At a terminal: the command exits, its background job (INT ignored, as a
    non-interactive shell starts it) runs on; awsflock has taken the terminal back, so Ctrl-C
    reaches awsflock, which stops the job and exits 130 with the lock released."""
    script = f"bash -c '{_worker(tmp_path)}' & echo up"
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
        run = Running(proc)
        child = _started(tmp_path, pids)
        run.said("in its process group: holding")
        os.write(master, b"\x03")  # Ctrl-C
        code = proc.wait(timeout=30)
        run._reader.join(30)
        err = "".join(run.lines)
        proc.stderr.close()  # type: ignore[union-attr]
    finally:
        os.close(master)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code == 130, err
    assert not _alive(child), "a process left by the command ran on after Ctrl-C"
    assert _state(awsflock, lock_name) == "free"


def test_a_stopped_command_still_ends_on_a_signal_to_run(awsflock: Cli, lock_name, tmp_path):
    # Ctrl-Z stops the command's group; a TERM sent to awsflock then must still reach it.
    run = Running(
        awsflock.popen("run", lock_name, "-c", f"echo $$ > {tmp_path}/cmd.pid; sleep 300")
    )
    command = int(wait_for(tmp_path / "cmd.pid"))
    os.killpg(command, signal.SIGSTOP)
    run.proc.send_signal(signal.SIGTERM)
    code, _, err = run.finish()
    assert code == 128 + signal.SIGTERM, err
    assert _state(awsflock, lock_name) == "free"
