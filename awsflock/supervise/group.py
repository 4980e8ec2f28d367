"""What ``awsflock run`` waits for: its command, and (unless ``--hold-until command``) every
process left in the command's process group.

The rule is flock(1)'s, for processes instead of file descriptors: flock keeps its lock while
any process still holds the lock file open, so a script's background job (`terraform ... &`)
stays protected after the script exits. ``run`` holds (and renews) the lock until the command
**and every live process of its process group** have exited. A process that leaves the group
(``setsid``; ``setpgid``, as GNU ``timeout`` does without ``--foreground``) leaves the lock's
protection with it. On Linux awsflock is the subreaper of the group's orphans and reaps them
(``tree``), so the kernel's null signal to the group answers for live processes; zombies that
another process never reaps are told apart through ``/proc``.

When the work was interrupted (the command was ended by a signal, or exited 128+N for INT, TERM,
HUP or QUIT as a shell does for a child killed that way, or awsflock itself was sent one of
those, as it is when a CI job is cancelled), what is left is stopped: TERM, then KILL after
``--kill-after``. Once the command has exited, awsflock takes the terminal back, so Ctrl-C
reaches it and stops what is left. If the lease is lost, the whole group is stopped the same
way, and the lock is released only once the group is empty. If awsflock itself is killed, its
guard KILLs the group.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from awsflock import errors
from awsflock.lock.telling import NOTICE
from awsflock.supervise import processes
from awsflock.supervise.tree import Guard, reap_group
from awsflock.text import format_seconds

if TYPE_CHECKING:
    from awsflock.lock.heartbeat import Hold

log = logging.getLogger("awsflock.runner")

#: How often the command is checked for its end, and the lease for its loss, while it runs.
POLL = 0.1
#: How often the command's process group is looked at once the command itself has exited.
GROUP_POLL = 0.2
#: How often, at most, /proc is read to tell a group of zombies only from a live one.
ZOMBIE_SCAN = 1.0
#: Signals that ask for the work to stop: one of these (sent to awsflock and forwarded, or
#: ending the command) has what is left of the command's group stopped too. USR1 and USR2 are
#: only forwarded.
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT})
#: How many pids a message names before saying "and N more".
NAMED = 5
EXIT_LOST = 124
#: The hold reached its --max-hold, and the command was stopped there.
EXIT_CAPPED = 123

#: ``--hold-until``: until the command's whole process group has exited, or the command alone.
HOLD_UNTIL = ("group", "command")


@dataclass
class Group:
    """The command's process group (its pgid is the command's pid). With ``reaper``, awsflock is
    the subreaper of its orphans and reaps them; the guard KILLs it if awsflock dies."""

    pgid: int
    guard: Guard | None = None
    reaper: bool = False
    #: Once seen empty (and the command reaped), its pgid may belong to another process later:
    #: nothing is sent to it any more, nor left to the guard.
    gone: bool = False
    _zombies: list[int] | None = None
    _next_scan: float = 0.0
    _denied: bool = False

    def signal(self, sig: int) -> None:
        if self.gone:
            return
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            if not self._denied:
                self._denied = True
                log.warning(
                    "cannot signal the processes left in the command's group (another user's): "
                    "waiting for them to exit"
                )

    def ask_to_stop(self) -> None:
        """TERM, and CONT so that a stopped member (Ctrl-Z, SIGTTIN) gets it."""
        self.signal(signal.SIGTERM)
        self.signal(signal.SIGCONT)

    def reap(self) -> None:
        if self.reaper and not self.gone:
            reap_group(self.pgid, self.pgid)

    def alive(self) -> bool:
        """Whether a live process is left in the group. The kernel says at once whether any
        process is (a null signal); as the subreaper awsflock has reaped the group's orphans,
        so that is a live one unless a process outside the group never reaps its child. /proc,
        read at most every ``ZOMBIE_SCAN`` seconds, tells such a group of zombies alone: the
        same zombies and nothing live, two scans apart (a scan can miss a process forked while
        it reads, never twice the same way)."""
        if self.gone:
            return False
        self.reap()
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return self._empty()
        except PermissionError:
            pass  # a member runs as another user (a setuid program): it still runs
        began = time.monotonic()
        if began < self._next_scan:
            return True
        scan = processes.group_scan(self.pgid, first=True)
        self._next_scan = time.monotonic() + max(ZOMBIE_SCAN, 20 * (time.monotonic() - began))
        if scan is None or scan[0] or not scan[1]:  # no /proc; a live one; or one just missed
            self._zombies = None
            return True
        if scan[1] != self._zombies:
            self._zombies = scan[1]
            return True
        return self._empty()

    def _empty(self) -> bool:
        self.gone = True
        if self.guard is not None:
            self.guard.follow(set())  # the pgid may be another's from now on
        return False

    def describe(self) -> str:
        """'2 processes (PID NAME, PID NAME)' for a message."""
        members = processes.group_members(self.pgid) or []
        if not members:  # no /proc to say which, or they have just gone
            return "processes"
        named = ", ".join(f"{pid} {name}" for pid, name in members[:NAMED])
        more = f" and {len(members) - NAMED} more" if len(members) > NAMED else ""
        noun = "process" if len(members) == 1 else "processes"
        return f"{len(members)} {noun} ({named}{more})"

    def end(self) -> None:
        """The work is over, or no longer awsflock's to stop: the guard stands down."""
        self.gone = True
        if self.guard is not None:
            self.guard.done()


@dataclass
class Watch:
    """What ``supervise`` watches: the command, its group, the hold, and the signals awsflock
    was sent (``received``, appended to by its signal handler)."""

    child: subprocess.Popen[bytes]
    group: Group
    hold: Hold
    lost: threading.Event
    kill_after: float
    until_group: bool = True
    received: list[int] = field(default_factory=list)
    #: Takes the terminal back for awsflock (when the command had it): once the command has
    #: exited, Ctrl-C must reach awsflock, which stops what the command left.
    take_terminal: Callable[[], None] | None = None
    #: The hold ended at its --max-hold (``errors.HoldCapped``), not by a loss.
    capped: bool = False

    def lease_lost(self) -> bool:
        try:
            self.hold.check()  # by the clock, so a stuck renewal cannot delay this
        except errors.LeaseLost as exc:
            self.capped = isinstance(exc, errors.HoldCapped)
            self.lost.set()
        return self.lost.is_set()

    def lost_status(self) -> int:
        """``run``'s exit status once the hold ended under the command: 123 at its max-hold,
        else 124."""
        return EXIT_CAPPED if self.capped else EXIT_LOST

    def stop_asked(self) -> bool:
        return self.stop_signal() is not None

    def stop_signal(self) -> int | None:
        """The first signal awsflock was sent that asks the work to stop, if any."""
        return next((sig for sig in self.received if sig in STOP_SIGNALS), None)


def supervise(watch: Watch) -> int:
    """Wait for the command and, holding until the group, for what it left in its group; on
    loss of the lease stop them all. The command's exit status, or ``Watch.lost_status``."""
    try:
        status = _wait_command(watch)
        if status is None or not watch.until_group:
            return watch.lost_status() if status is None else status
        return _wait_group(watch, status)
    finally:
        # From here on a signal to awsflock is not forwarded (the pgid may be reused), and the
        # guard stands down: the work is over, or (--hold-until command) no longer ours.
        watch.group.end()


def _wait_command(watch: Watch) -> int | None:
    """The command's exit status, or None if the lease was lost (and the group stopped)."""
    next_look = 0.0
    while True:
        try:
            code = watch.child.wait(timeout=POLL)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None:
            return 128 - code if code < 0 else code
        if watch.lease_lost():
            _stop_after_loss(watch)
            return None
        if time.monotonic() >= next_look:  # reap what the group's orphans left
            watch.group.reap()
            next_look = time.monotonic() + GROUP_POLL


def _wait_group(watch: Watch, status: int) -> int:
    """After the command exited with ``status``: hold until its group is empty."""
    group = watch.group
    if not group.alive():
        return status
    if watch.take_terminal is not None:
        watch.take_terminal()
    kill_at: float | None = None
    if _interrupted(status, watch):
        kill_at = _stop_leftovers(watch, status)
    else:
        log.log(
            NOTICE,
            "the command exited (status %d) but left %s in its process group: holding %r, "
            "renewing it, until they exit (--hold-until command releases when the command "
            "exits; TERM or INT to awsflock, pid %d, stops them)",
            status,
            group.describe(),
            watch.hold.lock_id,
            os.getpid(),
            extra={"event": "waiting_for_group", "lock_id": watch.hold.lock_id},
        )
    while group.alive():
        if watch.lease_lost():
            _stop_after_loss(watch, kill_at)
            return watch.lost_status()
        if kill_at is None and watch.stop_asked():
            kill_at = _stop_leftovers(watch, status)
        if kill_at is not None and time.monotonic() >= kill_at:
            group.signal(signal.SIGKILL)
        time.sleep(GROUP_POLL)
    log.info(
        "the processes left in the command's group have exited; releasing %r",
        watch.hold.lock_id,
        extra={"event": "group_exited", "lock_id": watch.hold.lock_id},
    )
    stopped_by = watch.stop_signal()
    if stopped_by is not None and status == 0:
        return 128 + stopped_by  # the work it left was cut short: not the command's success
    return status  # its own failure (or signal) says more than ours


def _interrupted(status: int, watch: Watch) -> bool:
    """Whether the work was asked to stop: the command ended by INT, TERM, HUP or QUIT (or
    exited 128+N for one, as a shell does), or awsflock itself was sent one."""
    return status - 128 in STOP_SIGNALS or watch.stop_asked()


def _stop_leftovers(watch: Watch, status: int) -> float:
    """TERM what is left of the group; the monotonic time at which KILL follows."""
    sent = watch.stop_signal()
    why = (
        f"awsflock was sent signal {sent}"
        if sent is not None
        else f"the command was interrupted (status {status})"
    )
    log.log(
        NOTICE,
        "%s: sending TERM to what the command left, %s, KILL after %s",
        why,
        watch.group.describe(),
        format_seconds(watch.kill_after),
        extra={"event": "stopping_group", "lock_id": watch.hold.lock_id},
    )
    watch.group.ask_to_stop()
    return time.monotonic() + watch.kill_after


def _stop_after_loss(watch: Watch, kill_at: float | None = None) -> None:
    """The lease was lost: TERM the whole group, KILL after ``kill_after`` (or sooner, if a stop
    already under way set an earlier time), and wait until it is gone — or, holding until the
    command only, until the command is (what else is left is KILLed all the same)."""
    log.error(
        "%s: sending TERM to the command's process group, KILL after %s",
        "the hold reached --max-hold" if watch.capped else "the lease was lost",
        format_seconds(watch.kill_after),
    )
    group, child = watch.group, watch.child
    group.ask_to_stop()
    deadline = time.monotonic() + watch.kill_after
    if kill_at is not None:
        deadline = min(deadline, kill_at)

    def done() -> bool:
        ended = child.poll() is not None
        return ended and (not watch.until_group or not group.alive())

    while not done() and time.monotonic() < deadline:
        time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
    while not done():
        group.signal(signal.SIGKILL)
        time.sleep(POLL)
    # Whatever else is left in its group goes too: it ran under the lost lease.
    group.signal(signal.SIGKILL)
