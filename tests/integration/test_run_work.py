"""`awsflock run` follows all of its command's work, not only its process group: a process that
moves to a group of its own (GNU `timeout`, `set -m` jobs) is waited for and stopped too; if
awsflock itself is killed, its guard KILLs the work; once the command has exited, Ctrl-C
reaches awsflock; a stopped command still gets the signals sent to awsflock.

Real processes against moto's server; a background child ends when the test creates a file."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import termios
import time

import pytest

from awsflock.supervise.group import GROUP_POLL
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


def test_a_process_in_a_group_of_its_own_is_waited_for(awsflock: Cli, lock_name, tmp_path, pids):
    # GNU timeout puts itself and its command in a process group of their own.
    worker = _worker(tmp_path)
    run = Running(awsflock.popen("run", lock_name, "-c", f"timeout 60 sh -c '{worker}' & exit 0"))
    child = _started(tmp_path, pids)
    run.said("running: holding")
    assert _state(awsflock, lock_name) == "held" and _alive(child)
    (tmp_path / "bg.go").touch()
    code, _, err = run.finish()
    assert code == 0, err
    assert (tmp_path / "bg.done").exists() and _state(awsflock, lock_name) == "free"


def test_a_lost_lease_stops_work_that_left_the_commands_group(
    awsflock: Cli, lock_name, tmp_path, pids
):
    worker = _worker(tmp_path, trap='trap "" TERM;')
    proc = awsflock.popen(
        "run", lock_name, "--lease-duration", "3s", "-c", f"timeout 60 sh -c '{worker}'"
    )
    run = Running(proc)
    child = _started(tmp_path, pids)
    forced = awsflock("force-release", lock_name, "--reason", "test", "--yes")
    assert forced.returncode == 0, forced.stderr
    code, _, err = run.finish()
    assert code == 124, err
    assert not _alive(child), "run exited while work of the lost lease ran in another group"


def test_if_awsflock_is_killed_its_guard_kills_the_work(awsflock: Cli, lock_name, tmp_path, pids):
    # PR_SET_PDEATHSIG kills only the command itself; the guard kills what it started.
    worker = _worker(tmp_path)
    group_worker = _worker(tmp_path, "own")
    script = f"sh -c '{worker}' & timeout 60 sh -c '{group_worker}' & wait"
    run = Running(awsflock.popen("run", lock_name, "-c", script))
    child, other = _started(tmp_path, pids), _started(tmp_path, pids, "own")
    # The guard learns of a new process group when awsflock next looks at the work (every
    # GROUP_POLL): a group made in the instant before awsflock dies may escape it (documented).
    time.sleep(5 * GROUP_POLL)
    run.proc.send_signal(signal.SIGKILL)
    run.finish()
    _until(lambda: not _alive(child) and not _alive(other))
    assert not (tmp_path / "bg.done").exists() and not (tmp_path / "own.done").exists()


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
        run.said("running: holding")
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
