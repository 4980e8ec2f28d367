"""What a wait says, and how long it pauses between polls: for both waiting engines
(``awsflock.lock.waiting`` and its asynchronous source, ``waiting_async``), whose runs
(``Acquisition``) it reads and never changes but for what it has said.

What a wait says, at ``NOTICE`` (the CLI shows it unless -q): who holds the lock when the wait
begins, how it stands now and then on a long wait (``Progress``), and the grant that ends it.
A lock free at once says nothing above INFO, nor does a try that does not wait (its caller says
why it gave up).
"""

from __future__ import annotations

import logging
import random
import threading
from typing import TYPE_CHECKING, Any, Union

from awsflock import errors, metrics
from awsflock.clock import Clock
from awsflock.lock.grants import event_fields
from awsflock.records import EXPIRED, LockRecord
from awsflock.text import format_seconds

if TYPE_CHECKING:
    from awsflock.lock import acquisition, acquisition_async

    #: One acquire's run, in either engine.
    Acquisition = Union[acquisition.Acquisition, acquisition_async.Acquisition]

log = logging.getLogger("awsflock.lease")

#: A waiter polls about once a second (jittered), so it sees a release within about a second.
POLL_INTERVAL = 1.0
POLL_JITTER = 0.25
#: The level of what a waiting acquire says: above INFO, so the CLI shows it by default (NOTICE
#: and up unless -q), below WARNING, as nothing is wrong.
NOTICE = logging.INFO + 5
#: On a long wait a line says how it stands: first this long after the wait began, then each
#: time the wait has doubled, at most PROGRESS_MAX apart (30 s, 1 min, 2, 4, 8, 13, 18 min...); a
#: new holder of a lock is said at once. No line comes within PROGRESS_GAP of the one before.
PROGRESS_FIRST = 30.0
PROGRESS_MAX = 300.0
PROGRESS_GAP = 10.0


def outcome(exc: BaseException, wait_s: float | None) -> str:
    """The acquisitions metric's outcome of a wait (``wait_s``) that ended in ``exc``."""
    if isinstance(exc, errors.LockBusy):
        return metrics.BUSY if wait_s == 0 else metrics.TIMED_OUT
    if isinstance(exc, (errors.Cancelled, KeyboardInterrupt)):
        return metrics.CANCELLED
    return metrics.ERROR


def busy_error(run: Acquisition, clock: Clock) -> errors.LockBusy:
    """LockBusy naming what kept the lock: its holder, or the line of fair waiters."""
    waited = clock.monotonic() - run.start
    return errors.LockBusy(
        _held(run, clock.time(), " is held by")
        + (f"; gave up after {format_seconds(waited)}" if waited >= 1 else ""),
        holder=run.holder,
    )


def _held(run: Acquisition, now: float, verb: str) -> str:
    """What keeps the lock from this acquire: its holder, fair waiters in line before it, or
    a shrink of the pool in steps."""
    if run.resizing is not None:
        return (
            f"pool {run.lock_id!r} is being resized to {run.resizing} slots (a pool-resize under "
            "way; if none is, one stopped part-way: run it again)"
        )
    count = _live_waiters(run, now)
    waiting = f"{count} {'waiter is' if count == 1 else 'waiters are'} in line for it (--fair)"
    if run.own_ticket is None and count and run.free():
        return f"lock {run.lock_id!r} is free, but {waiting} and go first"
    holder = run.holder
    text = f"{_what(run)}{verb} {holder.describe(now) if holder else 'another lease'}"
    if run.own_ticket is None and count:
        text += f", and {waiting}: they go first"
    return text


def _live_waiters(run: Acquisition, now: float) -> int:
    """Fair waiters in line that polled lately, other than this acquire itself."""
    return sum(
        1
        for w in run.line.waiters
        if w.ticket != run.own_ticket and not run.line.lapsed(w, now, run.skew)
    )


def next_pause(
    holder: LockRecord | None,
    deadline: float | None,
    *,
    clock: Clock,
    rng: random.Random,
    skew: float,
) -> float | None:
    """How long to sleep before the next try, or None to give up now."""
    pause = POLL_INTERVAL * (1 + rng.uniform(-POLL_JITTER, POLL_JITTER))
    # Wake no later than the moment the holder's lease can be reclaimed, or its lock-delay
    # after its end is over.
    end = None if holder is None else holder.free_after()
    if end is None and holder is not None and not holder.released:
        end = holder.expires_at
    if end is not None:
        reclaim_in = end + skew - clock.time() + 0.05
        if reclaim_in > 0:
            pause = min(pause, reclaim_in)
    if deadline is not None:
        left = deadline - clock.monotonic()
        if left <= 0:
            return None
        # The last try happens at the deadline, never before it.
        pause = min(pause, left)
    return max(pause, 0.0)


def _what(run: Acquisition) -> str:
    return run.what()


def check_cancel(cancel: threading.Event | None, when: str) -> None:
    if cancel is not None and cancel.is_set():
        raise errors.Cancelled(f"stopped {when}; nothing is held", hint="")


def log_retry(run: Acquisition) -> None:
    assert run.error is not None
    # A grant given back for arriving late is said at INFO: the wait goes on, and it is an
    # error only if the wait ends on it. Other errors: a warning the first time.
    if run.late_grant:
        level = logging.INFO
    else:
        level = logging.DEBUG if run.warned else logging.WARNING
        run.warned = True
    log.log(
        level,
        "acquire of %r: %s; still trying",
        run.lock_id,
        run.error.one_line(),
        extra={
            "event": "acquire_error",
            "lock_id": run.lock_id,
            "error": type(run.error).__name__,
        },
    )


class Progress:
    """What a wait has said: whether it said it waits (``said``), when it last said how it
    stands, and with which holder."""

    def __init__(self, run: Acquisition, wait_s: float | None, policy: Any) -> None:
        self.run = run
        self.wait_s = wait_s
        self.policy = policy
        self.said = False
        self.at = 0.0  # the last line's time (monotonic), and the wait at which one is due
        self.due = PROGRESS_FIRST
        self.holder = ""

    def refused(self) -> None:
        """An answered poll that did not grant: the first begins what the wait says, later ones
        tell how it stands; then the policy says its part."""
        if not self.run.told:
            self.run.told = True
            self.begin()
        else:
            self.tell()
        self.policy.tell(self.run)

    def begin(self) -> None:
        """The first answer that did not grant: who holds it, since when, until when, and how
        long this acquire waits (a try that does not wait says it at INFO only)."""
        run, wait_s = self.run, self.wait_s
        plan = (
            "waiting forever"
            if wait_s is None
            else f"waiting up to {format_seconds(wait_s)}"
            if wait_s > 0
            else "not waiting"
        )
        self.said = wait_s != 0
        self._note()
        log.log(
            NOTICE if self.said else logging.INFO,
            "%s; %s",
            _held(run, run.clock.time(), " by" if run.size else " is held by"),
            plan,
            extra={
                **event_fields("contended", run.lock_id, run.holder),
                "waiting_in_line": len(run.line.waiters),
            },
        )

    def tell(self) -> None:
        """A later answer that did not grant: say how the wait stands if a line is due, or if
        the lock has a new holder (not for a pool, whose slots change hands all the time)."""
        run, clock = self.run, self.run.clock
        mono = clock.monotonic()
        waited = mono - run.start
        changed = (
            run.size is None
            and not self.policy.tells_holder
            and self._holder() not in ("", self.holder)
        )
        due = waited >= self.due
        if due:
            self.due = min(self.due * 2, self.due + PROGRESS_MAX)
        if not self.said or not (due or changed) or mono - self.at < PROGRESS_GAP:
            return
        if self.wait_s is not None and waited >= self.wait_s:
            return  # answered after the wait's end (a slow try): the line ending it says so
        self._note()
        left = "" if self.wait_s is None else f" ({format_seconds(self.wait_s - waited)} left)"
        verb = " by" if run.size else " is now held by" if changed else " is held by"
        log.log(
            NOTICE,
            "still waiting after %s%s: %s",
            format_seconds(waited),
            left,
            _held(run, clock.time(), verb),
            extra={
                **event_fields("waiting", run.lock_id, run.holder),
                "waited_s": round(waited, 3),
            },
        )

    def _note(self) -> None:
        self.at, self.holder = self.run.clock.monotonic(), self._holder()

    def _holder(self) -> str:
        holder = self.run.holder
        return holder.lease_id if holder is not None and not holder.released else ""


def granted_after(lock_id: str, record: LockRecord, store: Any) -> LockRecord | None:
    """What a grant says of the lease before it: one line at ``NOTICE`` (the CLI shows it
    unless -q) and a metric where its holder did not release it, and the reclaimed one's
    (where it ran out and was taken over). Returns that record, or None."""
    previous = record.previous
    if previous is not None and previous.unreleased:
        metrics.record("awsflock.grants.after_unreleased", 1, lock_id, store)
        log.log(
            NOTICE,
            "%s",
            previous.describe(lock_id),
            extra={"event": "previous_unreleased", "lock_id": lock_id, **previous.as_dict()},
        )
    if previous is not None:
        reclaimed = previous.how == EXPIRED
    else:  # a store that does not say: its history does
        reclaimed = bool(record.history) and not record.history[0][1]
    if not reclaimed:
        return None
    metrics.record("awsflock.leases.reclaimed", 1, lock_id, store)
    log.info(
        "reclaimed %r from an expired lease",
        lock_id,
        extra=event_fields("reclaimed_expired", lock_id, record),
    )
    return record
