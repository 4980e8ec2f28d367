"""The wait loop of ``acquire``: when to try again, when to give up, what to say meanwhile.

Each try is one step of an ``Acquisition`` (``awsflock.acquisition``); this module only decides
the cadence: about once a second (jittered, so waiters spread out), never later than the moment
the holder's lease becomes reclaimable, with a last try exactly at the deadline; a pool probes
another free slot at once. A set ``cancel`` event stops the wait (holding nothing).

Another waiting policy is another function of this shape, called from ``LockTable.acquire``.
Whatever its cadence, it must keep the clean-up around the attempts as here: ``abandon`` on
every exit and around a grant, ``give_back`` when cancelled, ``still_fresh`` before returning.
Fair (first come, first served) waiting across processes needs more than a cadence: the store
must keep the line, which means new steps in ``LockStore``.
"""

from __future__ import annotations

import logging
import random
import threading

from awsflock import errors
from awsflock.acquisition import Acquisition, Grant, event_fields
from awsflock.clock import Clock
from awsflock.records import LockRecord
from awsflock.text import format_seconds

log = logging.getLogger("awsflock.lease")

#: A waiter polls about once a second (jittered), so it sees a release within about a second.
POLL_INTERVAL = 1.0
POLL_JITTER = 0.25


def wait_for(
    run: Acquisition,
    *,
    wait_s: float | None,
    clock: Clock,
    rng: random.Random,
    skew: float,
    cancel: threading.Event | None = None,
) -> Grant:
    """Try until ``run`` holds the lock or ``wait_s`` seconds passed (None: forever).

    Raises LockBusy (with ``.holder``) when it stayed held, the last error when the store could
    not be reached, and Cancelled once ``cancel`` is set; nothing is left held then.
    """
    deadline = None if wait_s is None else run.start + wait_s
    # The whole acquire, clean-up included, ends within the wait plus one request timeout.
    run.hard_end = None if deadline is None else deadline + run.store.request_timeout
    try:
        while True:
            _check_cancel(cancel, "while waiting")
            got = run.step()
            if got is not None:
                run.abandon(keep=got.lease_id)
                if cancel is not None and cancel.is_set():
                    run.give_back(got)
                    _check_cancel(cancel, "just as the lock was granted")
                got = run.still_fresh(got)
                if got is not None:
                    return got
            if run.wants_retry_now():
                continue
            if run.error is None and not run.told:
                run.told = True
                _log_contended(run, wait_s, clock)
            pause = next_pause(run.holder, deadline, clock=clock, rng=rng, skew=skew)
            if pause is None:
                break
            if run.error is not None:
                _log_retry(run)
            if cancel is not None:
                if clock.wait(cancel, pause):
                    continue  # checked at the top of the loop
            else:
                clock.sleep(pause)
    except BaseException:
        run.abandon()
        raise
    run.abandon()
    if run.error is not None:
        raise run.error
    waited = clock.monotonic() - run.start
    holder = run.holder
    desc = holder.describe(clock.time()) if holder else "another lease"
    raise errors.LockBusy(
        f"{_what(run)} is held by {desc}"
        + (f"; gave up after {format_seconds(waited)}" if waited >= 1 else ""),
        holder=holder,
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
    if holder is not None and not holder.released:
        # Wake no later than the moment the holder's lease can be reclaimed.
        reclaim_in = holder.expires_at + skew - clock.time() + 0.05
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
    if run.size:
        return f"all {run.size} slots of pool {run.lock_id!r} are held; the next to free up"
    return f"lock {run.lock_id!r}"


def _check_cancel(cancel: threading.Event | None, when: str) -> None:
    if cancel is not None and cancel.is_set():
        raise errors.Cancelled(f"stopped {when}; nothing is held", hint="")


def _log_retry(run: Acquisition) -> None:
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


def _log_contended(run: Acquisition, wait_s: float | None, clock: Clock) -> None:
    plan = (
        "waiting forever"
        if wait_s is None
        else f"waiting up to {format_seconds(wait_s)}"
        if wait_s > 0
        else "not waiting"
    )
    what = f"{_what(run)} is held by" if not run.size else f"{_what(run)} by"
    holder = run.holder
    log.info(
        "%s %s; %s",
        what,
        holder.describe(clock.time()) if holder else "another lease",
        plan,
        extra=event_fields("contended", run.lock_id, holder),
    )
