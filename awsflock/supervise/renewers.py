"""The keep-alive renewers on this host (``awsflock.supervise.keepalive``): each one's pid file,
named by its LEASE_ID, with its start time and the lock (or a set's names) it keeps; found,
stopped (``awsflock release``) and asked to renew at once (``awsflock renew``)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from awsflock import errors
from awsflock.supervise.processes import alive

#: How long ``release`` waits for the renewer it stopped to exit.
STOP_WAIT = 2.0


def lock_key(lock_ids: str | Sequence[str]) -> str:
    """How a pid file names what its renewer keeps: the lock's name, or a set's names (sorted,
    one per line: a name holds no control character), so any order of them finds it."""
    return lock_ids if isinstance(lock_ids, str) else "\n".join(sorted(lock_ids))


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


def stop(lease_id: str, lock_id: str | Sequence[str] | None = None) -> bool:
    """Stop the renewer of ``lease_id`` (on ``lock_id``) on this host, if there is one,
    without its release (``awsflock release`` released it). True if one was stopped."""
    pid = renewer_of(lease_id, lock_id)
    if pid is None:
        return False
    os.kill(pid, signal.SIGUSR1)
    end = time.monotonic() + STOP_WAIT
    while time.monotonic() < end and alive(pid):
        time.sleep(0.02)
    return True


def renew_now(lease_id: str, lock_id: str | Sequence[str]) -> bool:
    """Ask the renewer of ``lease_id`` to renew now with its own length (after the script
    renewed it with another). True if there is one."""
    pid = renewer_of(lease_id, lock_id)
    if pid is not None:
        os.kill(pid, signal.SIGUSR2)
    return pid is not None


def renewer_of(lease_id: str, lock_id: str | Sequence[str] | None = None) -> int | None:
    """The pid of the live renewer of ``lease_id`` (of ``lock_id``, when given) on this host."""
    path = pid_file(lease_id, create=False)
    try:
        pid_text, started, lock = [*path.read_text().split(" ", 2), "", ""][:3]
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    if not alive(pid, started):
        path.unlink(missing_ok=True)
        return None
    if lock_id is not None and lock and lock != lock_key(lock_id):
        return None
    return pid


def sweep() -> None:
    """Remove the pid files of renewers that are gone (killed without their clean-up)."""
    folder = runtime_dir(create=False)
    for path in folder.glob("keepalive-*.pid") if folder.is_dir() else ():
        lease_id = path.name[len("keepalive-") : -len(".pid")]
        with contextlib.suppress(errors.AwsflockError):
            renewer_of(lease_id)
