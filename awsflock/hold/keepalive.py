"""``acquire --keep-alive``: a detached renewer keeps a lease alive while a process lives.

``spawn`` starts it (the hidden command ``awsflock keep-alive``) in a session of its own: no
terminal, stdin and stderr on /dev/null, none of the caller's other file descriptors, so it
never holds a ``$(...)`` or a CI step's output open. It renews at once, recording itself as the
lease's keeper (``status`` shows it), and says "ok" on a pipe the caller reads before it prints
the LEASE_ID; then it closes that pipe too.

``serve`` is the renewer: a ``Hold`` renews every third of the lease while the followed process
lives (checked four times a second; a recycled pid is told apart by its start time). When that
process is gone, or on TERM, INT or HUP, it releases the lease and exits. ``awsflock release``
stops it first (USR1: exit without releasing) through its pid file, and releases. If the lease
is lost (refused, or no renewal before the safety deadline) it cannot stop the script: it writes
the reason to the followed process's stderr where it can (``/proc/PID/fd/2``), and exits; the
next ``renew`` or ``release`` of the LEASE_ID exits 3 saying why. It leaves no file behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from awsflock import errors

if TYPE_CHECKING:
    from awsflock.lease import LockTable

#: How often the renewer looks at the process it follows.
FOLLOW_EVERY = 0.25
#: How long ``release`` waits for the renewer it stopped to exit.
STOP_WAIT = 2.0


def runtime_dir(create: bool = True) -> Path:
    """Where renewers keep their pid files: private to the user."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = Path(base) / f"awsflock-{os.getuid()}"
    if create:
        path.mkdir(mode=0o700, exist_ok=True)
    return path


#: What a LEASE_ID may hold to become part of a file name (a uuid, and a pool's ".slot").
_SAFE_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z.-]*")


def pid_file(lease_id: str, create: bool = True) -> Path:
    if not _SAFE_ID.fullmatch(lease_id):
        raise errors.UsageError(f"not a LEASE_ID: {lease_id!r}")
    return runtime_dir(create) / f"keepalive-{lease_id}.pid"


def start_time(pid: int) -> str:
    """The process's start time (Linux: /proc/PID/stat field 22), '' where unknown: with the
    pid, it names one process, not whichever later gets the same pid."""
    stat = _stat(pid)
    return stat[19] if stat is not None and len(stat) > 19 else ""


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()  # fields after the command name: state, ppid...


def alive(pid: int, started: str = "") -> bool:
    """Whether process ``pid`` (started at ``started``, when known) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user's
    stat = _stat(pid)
    if stat is None:
        return True  # no /proc: the signal check is all there is
    if stat[0] in ("Z", "X"):
        return False  # exited, not yet reaped by its parent
    return not started or stat[19] == started


def spawn(options: list[str], lock_id: str, lease_id: str, lease_s: float, follow: int) -> int:
    """Start the renewer for a lease this process holds; its pid once it renewed the lease.
    ``options``: the store's command-line options (table, endpoint, region, ...)."""
    argv = [
        sys.executable,
        "-m",
        "awsflock",
        "keep-alive",
        lock_id,
        lease_id,
        "--lease-duration",
        f"{lease_s}s",
        "--while-pid",
        str(follow),
        "--while-pid-start",
        start_time(follow) or "-",
        *options,
    ]
    child = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,
        cwd="/",
    )
    # The renewer outlives us: nobody waits for it (without this, the Popen object would warn
    # that it is still running when it is collected).
    child.returncode = 0
    assert child.stdout is not None
    with child.stdout:
        ready, _, _ = select.select([child.stdout], [], [], 30.0)
        said = child.stdout.readline().decode(errors="replace").strip() if ready else ""
    if said == "ok":
        return child.pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(child.pid, signal.SIGKILL)
    if said.startswith("error "):
        code, _, message = said[6:].partition(" ")
        error = errors.AwsflockError(f"the keep-alive renewer could not start: {message}")
        error.exit_code = int(code) if code.isdigit() else 1
        raise error
    raise errors.AwsflockError(
        "the keep-alive renewer did not start" + (f": {said}" if said else " within 30s"),
        hint="run `awsflock keep-alive --help`, or acquire without --keep-alive",
    )


def stop(lease_id: str) -> bool:
    """Stop the renewer of ``lease_id`` on this host, if there is one, without its release
    (``awsflock release`` releases). True if one was stopped."""
    path = pid_file(lease_id, create=False)
    try:
        pid_text, _, started = path.read_text().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    if not alive(pid, started.strip()):
        path.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGUSR1)
    end = time.monotonic() + STOP_WAIT
    while time.monotonic() < end and alive(pid, started.strip()):
        time.sleep(0.02)
    return True


def serve(
    table: LockTable,
    lock_id: str,
    lease_id: str,
    lease_s: float,
    follow: int,
    follow_started: str,
    handshake: IO[str],
) -> int:
    """The renewer (see the module docstring). Returns its exit status."""
    stopping = threading.Event()
    release = [True]

    def on_signal(signum: int, _frame: object) -> None:
        if signum == signal.SIGUSR1:
            release[0] = False  # `awsflock release` is releasing it
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, on_signal)
    keeper = f"host {socket.gethostname()}, pid {os.getpid()}, following pid {follow}"
    try:
        lease = table.renew_lease(lock_id, lease_id, lease=lease_s, keeper=keeper)
    except errors.AwsflockError as err:
        _say(handshake, f"error {err.exit_code} {err.one_line()}")
        return err.exit_code
    path = pid_file(lease_id)
    path.write_text(f"{os.getpid()} {start_time(os.getpid())}")
    try:
        _say(handshake, "ok")
        handshake.close()
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)  # nothing of the caller's stays open
        hold = table.hold(lock_id, lease=lease_s)
        hold.adopt(lease)
        hold.start_renewing()
        while not stopping.wait(FOLLOW_EVERY):
            if hold.lost.is_set() or not alive(follow, follow_started):
                break
        if hold.lost.is_set():
            try:
                hold.check()
            except errors.LeaseLost as lost:
                _tell_lost(lost, follow, lock_id)
            release[0] = True  # if it is still ours (lost by our own deadline), give it back
        try:
            hold.stop(release=release[0])
        except errors.AwsflockError:
            return 3
        return 0
    finally:
        path.unlink(missing_ok=True)


def _say(handshake: IO[str], line: str) -> None:
    with contextlib.suppress(OSError):
        handshake.write(line + "\n")
        handshake.flush()


def _tell_lost(lost: errors.LeaseLost, follow: int, lock_id: str) -> None:
    """Write the loss to the followed process's stderr, if it is still there: the script cannot
    be stopped, but its log shows why its lock went away."""
    why = lost.message
    if "it was released" in why:
        return  # released elsewhere (by its LEASE_ID): nothing was lost
    line = (
        f"awsflock: warning: the lock {lock_id!r} kept alive for this process was lost ({why}); "
        "commands that must stop when it is lost should use `awsflock run`\n"
    )
    with contextlib.suppress(OSError), open(f"/proc/{follow}/fd/2", "w") as stderr:
        stderr.write(line)
