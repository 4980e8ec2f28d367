"""``acquire --keep-alive``'s plan, made before the lock is waited for: which process the
lease is kept alive for (read now, so that a pid recycled during the wait is not the one
followed), how long a lease it takes, and whether that can work at all. ``keepalive`` then
starts the renewer once the lease is granted."""

from __future__ import annotations

import dataclasses

from awsflock import errors
from awsflock.lock import renewal
from awsflock.supervise import processes, renewers

#: The default lease of ``acquire --keep-alive``: short, since it is renewed.
KEEP_ALIVE_LEASE = 60.0
#: The shortest: renewed as the policy says, it must leave the heartbeat's margin.
KEEP_ALIVE_MIN = renewal.POLICY.shortest_lease()


@dataclasses.dataclass(frozen=True)
class KeepAlive:
    """A kept-alive lease's plan: the process ``follow`` (started at ``started``) it is kept
    for, its lease length ``lease_s``, and a ``warning`` to give the caller, if any."""

    follow: int
    started: str
    lease_s: float
    warning: str = ""


def plan(while_pid: int | None, lease_s: float, lease_given: bool) -> KeepAlive:
    """Plan keeping a lease alive for ``while_pid`` (default: the calling shell).
    ``lease_given``: whether ``lease_s`` was asked for (else the short default is used).
    Raises ``UsageError`` if there is no such process or the lease is too short to renew in
    time. Also clears the pid files renewers that were killed left behind."""
    follow = while_pid or processes.default_follow()
    started = processes.start_time(follow)
    if not processes.alive(follow):
        raise errors.UsageError(
            f"there is no process {follow} to keep the lease alive for",
            hint="give --while-pid the pid of a running process (e.g. $$)",
        )
    if not lease_given:
        lease_s = KEEP_ALIVE_LEASE
    if lease_s < KEEP_ALIVE_MIN:
        raise errors.UsageError(
            f"a kept-alive lease of {lease_s:g}s is too short to be renewed in time",
            hint=f"use --lease-duration {KEEP_ALIVE_MIN:g}s or longer with --keep-alive",
        )
    warning = ""
    if follow == 1:
        warning = (
            "following pid 1 (init), which does not exit: the lock is kept until "
            "`awsflock release`; give --while-pid the process to follow"
        )
    renewers.sweep()
    return KeepAlive(follow, started, lease_s, warning)
