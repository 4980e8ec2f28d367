"""``acquire --keep-alive``: a detached renewer keeps a lease alive while a process lives.

``spawn`` starts it (the hidden command ``awsflock keep-alive``) in a session of its own: no
terminal, stdin and stderr on /dev/null, none of the caller's other file descriptors, so it
never holds a ``$(...)`` or a CI step's output open. It renews at once, recording itself as the
lease's keeper (``status`` shows it), and says "ok" on a pipe the caller reads before it prints
the LEASE_ID; then it closes that pipe too.

``serve`` is the renewer: a ``Hold`` renews the lease (as ``awsflock.lock.renewal`` says) while the
followed process lives (checked four times a second; a recycled pid is told apart by its start
time). When that process is gone, on TERM, INT or HUP, or when the lease is lost (a renewal
refused, or none got through before the safety deadline), it ends the lease itself, marked
force-released by the renewer with why, so that the script's own ``renew`` and ``release`` exit
3 saying so rather than pretending all went well; a loss is also written to the followed
process's stderr where it can (appended to ``/proc/PID/fd/2``): the renewer cannot stop the
script. ``awsflock release`` releases, then stops it (USR1: exit without ending anything)
through its pid file; ``renew`` asks it to renew at once with its own length (USR2). It leaves
no file behind.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, TYPE_CHECKING, Any, Callable

from awsflock import errors, sets
from awsflock.names import slot_of
from awsflock.records import KEEPALIVE_ACTOR, KEEPALIVE_FORCE
from awsflock.supervise.processes import alive, start_time
from awsflock.supervise.renewers import lock_key, pid_file

if TYPE_CHECKING:
    from awsflock.lock.heartbeat import Hold
    from awsflock.lock.lease import LockTable

#: How often the renewer looks at the process it follows.
FOLLOW_EVERY = 0.25
#: How long the renewer may take to start (Python importing botocore), besides its first renewal.
START_UP = 10.0


#: The environment variable that hands the renewer its LEASE_ID: on a command line every local
#: user could read it in ``ps``; a process's environment is readable by its own user alone.
LEASE_ENV = "AWSFLOCK_KEEP_ALIVE_LEASE_ID"


def spawn(
    options: list[str],
    lock_ids: tuple[str, ...],
    lease_id: str,
    lease_s: float,
    follow: int,
    follow_started: str,
    request_timeout: float,
    env: dict[str, str] | None = None,
    cancel: threading.Event | None = None,
) -> int:
    """Start the renewer for a lease this process holds on ``lock_ids`` (one lock, or a set's
    names); its pid once it renewed the lease (within ``START_UP`` plus ``request_timeout``).
    ``options``: the store's command-line
    options (table, endpoint, region, ...); ``env``: variables to add to its environment;
    ``follow_started``: the followed process's start time, read before the lock was waited
    for. ``cancel`` set (a signal) kills the renewer and raises ``Cancelled``."""
    argv = [
        sys.executable,
        "-m",
        "awsflock",
        "keep-alive",
        "--lease-duration",
        f"{lease_s}s",
        "--while-pid",
        str(follow),
        "--while-pid-start",
        follow_started or "-",
        *options,
        "--",  # a lock's name may start with "-"
        *lock_ids,
    ]
    child = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,
        cwd="/",
        env={**os.environ, **(env or {}), LEASE_ENV: lease_id},
    )
    # The renewer outlives us: nobody waits for it (without this, the Popen object would warn
    # that it is still running when it is collected).
    child.returncode = 0
    limit = START_UP + request_timeout
    said, answered = _handshake(child, limit, cancel)
    if said == "ok":
        return child.pid
    _kill(child.pid)
    raise _not_started(said, answered, limit)


def _handshake(
    child: subprocess.Popen[bytes], limit: float, cancel: threading.Event | None
) -> tuple[str, bool]:
    """The renewer's first line ("ok", or "error CODE MESSAGE"), and whether it said anything
    (or closed the pipe) within ``limit`` seconds. ``cancel`` set kills it and raises
    ``Cancelled``."""
    assert child.stdout is not None
    with child.stdout:
        end = time.monotonic() + limit
        ready: list[Any] = []
        while not ready and time.monotonic() < end:
            if cancel is not None and cancel.is_set():
                _kill(child.pid)
                raise errors.Cancelled("interrupted while the keep-alive renewer started")
            ready, _, _ = select.select([child.stdout], [], [], min(0.1, end - time.monotonic()))
        return child.stdout.readline().decode(errors="replace").strip() if ready else "", bool(
            ready
        )


def _not_started(said: str, answered: bool, limit: float) -> errors.AwsflockError:
    """The error of a renewer that did not start: its own (with its exit status), or what it
    said instead, or that it said nothing."""
    if said.startswith("error "):
        code, _, message = said[6:].partition(" ")
        error = errors.AwsflockError(f"the keep-alive renewer could not start: {message}")
        error.exit_code = int(code) if code.isdigit() else 1
        return error
    return errors.AwsflockError(
        "the keep-alive renewer did not start"
        + (f": {said}" if said else " (it exited at once)" if answered else f" within {limit:g}s"),
        hint="run `awsflock keep-alive --help`, or acquire without --keep-alive",
    )


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def serve(
    table: LockTable,
    lock_ids: tuple[str, ...],
    lease_id: str,
    lease_s: float,
    follow: int,
    follow_started: str,
    handshake: IO[str],
    render: Callable[[str], str] | None = None,
) -> int:
    """The renewer (see the module docstring). Returns its exit status. ``render``: the line
    a loss is told by, in the caller's log format."""
    signals = _Signals()
    keeper = f"host {socket.gethostname()}, pid {os.getpid()}, following pid {follow}"
    try:
        hold = _take_over(table, lock_ids, lease_id, lease_s, follow, follow_started, keeper)
    except Exception as err:  # whatever it is, the caller says it and gives the lease back
        code = err.exit_code if isinstance(err, errors.AwsflockError) else 1
        text = err.one_line() if isinstance(err, errors.AwsflockError) else repr(err)
        _say(handshake, f"error {code} {text}")
        return code
    try:
        _say(handshake, "ok")
        handshake.close()
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)  # nothing of the caller's stays open
        hold.start_renewing()
        _keep(hold, signals, lease_s, follow, follow_started)
        hold.stop(release=False)
        if signals.received == [signal.SIGUSR1]:
            return 0  # `awsflock release` released it
        if hold.lost.is_set():
            try:
                hold.check()
            except errors.HoldCapped as capped:
                # Renewed up to the cap: the lease runs out there, not a margin before it.
                _wait_for_the_end(hold, signals, follow, follow_started)
                _tell_lost(capped, follow, lock_ids, render or _plain)
                why = capped.message
            except errors.LeaseLost as lost:
                _tell_lost(lost, follow, lock_ids, render or _plain)
                why = f"its renewal failed ({lost.message})"
        elif signals.received:
            why = f"its keep-alive renewer was stopped by signal {signals.received[0]}"
        else:
            why = f"pid {follow}, for which it was kept alive, exited"
        return _end(table, lock_ids, lease_id, keeper, why)
    finally:
        pid_file(lease_id).unlink(missing_ok=True)


class _Signals:
    """The renewer's signals, handled from now: USR2 asks for a renewal at once
    (``renew_now``); TERM, INT, HUP and USR1 (``release``'s) stop it (``stopping``), each
    recorded in ``received``."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.renew_now = threading.Event()
        self.received: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum == signal.SIGUSR2:
            self.renew_now.set()  # the script renewed with a length of its own: renew with ours
            return
        self.received.append(signum)
        self.stopping.set()


def _take_over(
    table: LockTable,
    lock_ids: tuple[str, ...],
    lease_id: str,
    lease_s: float,
    follow: int,
    follow_started: str,
    keeper: str,
) -> Hold:
    """Take the lease over from the caller: renewed at once with our length and recorded as
    kept by ``keeper``, in a ``Hold`` not yet renewing; our pid file written."""
    if not alive(follow, follow_started):
        raise errors.AwsflockError(
            f"process {follow}, for which the lease was to be kept alive, has exited",
            hint="give --while-pid a process that runs until the lock is released",
        )
    # The hold checks the lease can be renewed in time.
    if len(lock_ids) == 1:
        hold = table.hold(lock_ids[0], lease=lease_s)
        hold.adopt(table.renew_lease(lock_ids[0], lease_id, lease=lease_s, keeper=keeper))
    else:
        from awsflock.lock.set_table import LeaseSet

        hold = table.hold(lock_ids, lease=lease_s)
        leases = table.renew_set_lease(lock_ids, lease_id, lease=lease_s, keeper=keeper)
        hold.adopt(LeaseSet(table, lease_id, leases))
    path = pid_file(lease_id)
    path.write_text(f"{os.getpid()} {start_time(os.getpid())} {lock_key(lock_ids)}")
    return hold


def _keep(hold: Hold, signals: _Signals, lease_s: float, follow: int, follow_started: str) -> None:
    """Keep the lease while the followed process lives, until a signal stops us or the lease
    is lost; after a renew of the script's own, renew with our length."""
    cut_back = False
    while not signals.stopping.wait(FOLLOW_EVERY):
        if hold.lost.is_set() or not alive(follow, follow_started):
            break
        if signals.renew_now.is_set():
            signals.renew_now.clear()
            cut_back = True
        if cut_back:
            # The script renewed with a length of its own: renew with ours. A longer one of
            # the script's is cut back only once its reading is a skew window old (renews
            # closer than that cannot be told apart, and a shorter one is then refused as
            # held longer): tried again until the lease ends within our length.
            with contextlib.suppress(errors.AwsflockError):
                renewed = hold.lease.renew(lease_s)
                cut_back = renewed.remaining() > lease_s + 1.0


def _wait_for_the_end(hold: Hold, signals: _Signals, follow: int, follow_started: str) -> None:
    """A hold that reached its max-hold: wait, renewing nothing, until its lease has run out
    at the cap (or the followed process exited, or a signal came), so that the renewer's end
    of it frees the lock no sooner than the cap would."""
    end = hold.lease.expires_mono
    while hold.clock.monotonic() < end and alive(follow, follow_started):
        if signals.stopping.wait(min(FOLLOW_EVERY, max(0.0, end - hold.clock.monotonic()))):
            return


def _end(table: LockTable, lock_ids: tuple[str, ...], lease_id: str, keeper: str, why: str) -> int:
    """End the lease on behalf of its holder, marked so that the holder's own ``renew`` and
    ``release`` exit 3 saying who ended it and why (a plain release would make a later
    ``release`` of the script say all was well). A lease already ended, or taken over after it
    ran out, is left as it is. A set's lease is ended name by name (an end grants nothing, so
    none needs the others'); a name not reached lapses with its short lease."""
    store = table.store
    one = len(lock_ids) == 1
    failed = 0
    for lock_id in lock_ids:
        member = lease_id if one else sets.member_id(lease_id, lock_id)
        end = table.clock.monotonic() + store.request_timeout
        try:
            with store.budget(end):
                store.force_release(
                    lock_id,
                    member,
                    force_id=f"{KEEPALIVE_FORCE}{os.getpid()}",
                    now_ms=table.now_ms(),
                    skew_ms=round(table.skew * 1000),
                    actor=f"{KEEPALIVE_ACTOR} ({keeper})",
                    reason=why,
                    slot=slot_of(member),
                )
        except errors.AwsflockError:
            failed = 1  # unreachable: the short lease lapses by itself
    return failed


def _say(handshake: IO[str], line: str) -> None:
    with contextlib.suppress(OSError):
        handshake.write(line + "\n")
        handshake.flush()


def _plain(message: str) -> str:
    return f"awsflock: warning: {message}"


def _tell_lost(
    lost: errors.LeaseLost,
    follow: int,
    lock_ids: str | tuple[str, ...],
    render: Callable[[str], str] = _plain,
) -> None:
    """Write the loss to the followed process's stderr, if it is still there: the script cannot
    be stopped, but its log shows why its lock went away. Appended, never truncating a log."""
    why = lost.message
    if "it was released" in why:
        return  # released elsewhere (by its LEASE_ID): nothing was lost
    names = (lock_ids,) if isinstance(lock_ids, str) else lock_ids
    what = f"the lock{'s' if len(names) > 1 else ''} {', '.join(map(repr, names))}"
    line = (
        render(
            f"{what} kept alive for this process was lost ({why}); commands that must stop "
            "when it is lost should use `awsflock run`"
        )
        + "\n"
    )
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_NOCTTY
    try:
        fd = os.open(f"/proc/{follow}/fd/2", flags)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.write(fd, line.encode())
    os.close(fd)
