"""The wait loop of ``acquire`` (one engine, ``wait``) and its plain policy.

Each try is one step of an ``Acquisition`` (``awsflock.lock.acquisition``). ``wait`` owns
everything every waiting policy must do alike: the deadline and the hard end (the wait plus one
request timeout, clean-up included), cancellation, the clean-up around a grant (``settle``: the
other attempts released, the policy's tidy-up, a grant given back if cancelled meanwhile or too
stale once all that took its time), ``abandon`` on every exit, what is said while waiting, and
the error the wait ends on. A policy (``Policy``) decides only what one poll sends and when to
poll again: ``PLAIN`` tries about once a second (jittered, so waiters spread out), never later
than the moment the holder's lease becomes reclaimable, with a last try exactly at the deadline;
a pool probes another free slot at once. ``awsflock.lock.line`` is the fair one.

The pause between polls is the engine's too: it spends it in the store's ``Waker``
(``LockStore.waker``, made when the wait first pauses and closed when it ends), which may end it
early when the store hints that the lock may have changed (Redis publishes when a lease ends);
the next poll then goes at once. The pause itself stays the policy's (jittered, never past the
holder's reclaim time nor the deadline), and a waker never stretches it and checks ``cancel``
at least every ``protocol.WAKE_CHECK``; the default one sleeps it out as before. A wake is a
hint, never a grant: only a poll's step takes the lock, so no policy needs to know of it.

What a wait says, at ``NOTICE`` (the CLI shows it unless -q): who holds the lock when the wait
begins, how it stands now and then on a long wait, and the grant that ends it
(``Grant.contended``: the "acquired" event is said at NOTICE): ``awsflock.lock.telling`` says
it, and times the pauses.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Awaitable
from typing import Callable

from awsflock import metrics
from awsflock.clock_async import AsyncClock
from awsflock.lock.acquisition_async import Acquisition
from awsflock.lock.finishing import finish  # async only
from awsflock.lock.grants import Grant
from awsflock.lock.telling import Progress, busy_error, check_cancel, log_retry, next_pause
from awsflock.protocol_async import AsyncWaker
from awsflock.records import LockRecord

#: A policy's tidy-up, as ``settle`` calls it.
Tidy = Callable[[], Awaitable[None]]  # sync: Tidy = Callable[[], None]


class Policy:
    """A waiting policy: what one poll sends, and when to poll again. The plain one: one take
    per poll. Subclasses override what differs; they cannot skip the engine's clean-up."""

    #: Polls are spaced from their starts (slow requests do not stretch the cadence).
    spaced = False
    #: ``tell`` says when the holder changes (the engine then does not).
    tells_holder = False

    async def poll(self, run: Acquisition) -> Grant | None:
        """One poll: the grant if it took the lock (a transient error left in ``run.error``)."""
        return await run.step()

    def again_now(self, run: Acquisition) -> bool:
        """Poll again without sleeping (a pool probe found another free slot)."""
        return run.wants_retry_now()

    def tell(self, run: Acquisition) -> None:
        """Say how the wait stands, after an answered poll (the engine says the rest)."""

    def wake_for(self, run: Acquisition) -> LockRecord | None:
        """The lease whose reclaim time the next poll must not sleep past (None: none)."""
        return run.holder

    async def waiting(self, run: Acquisition) -> None:
        """The wait goes on after an answered poll that did not grant: keep what it needs in
        the store (a waiting exclusive acquire's claim on a lock held shared)."""
        await run.claim()

    async def tidy(self, run: Acquisition) -> None:
        """Undo what the policy keeps in the store (a place in line), on a grant and on every
        exit alike; a failure must leave nothing that does not lapse by itself."""


#: Plain waiting.
PLAIN = Policy()
#: Left at the end of an acquire's bound (s), for its caller to report and exit within it (the
#: CLI's bound is its process's).
EXIT_ROOM = 0.1


def _hard_end(run: Acquisition, wait_s: float | None) -> float | None:
    """When the whole acquire, clean-up included, is over: the wait plus one request timeout,
    counted from ``run.origin`` (the CLI's process start) where it is given, less
    ``EXIT_ROOM``. The wait itself counts from the acquire's start."""
    if wait_s is None:
        return None
    origin = run.start if run.origin is None else min(run.origin, run.start)
    return origin + wait_s + run.store.request_timeout - EXIT_ROOM


async def wait(
    run: Acquisition,
    policy: Policy = PLAIN,
    *,
    wait_s: float | None,
    clock: AsyncClock,
    rng: random.Random,
    skew: float,
    cancel: threading.Event | None = None,
) -> Grant:
    """Poll as ``policy`` says until ``run`` holds the lock or ``wait_s`` seconds passed (None:
    forever).

    Raises LockBusy (with ``.holder``) when it stayed held, the last error when the store could
    not be reached, and Cancelled once ``cancel`` is set; nothing is left held then, and the
    policy has tidied up.
    """
    deadline = None if wait_s is None else run.start + wait_s
    run.hard_end = _hard_end(run, wait_s)
    progress = Progress(run, wait_s, policy)
    waker: AsyncWaker | None = None
    refused: float | None = None  # when the last answer that did not grant came
    try:
        while True:
            check_cancel(cancel, "while waiting")
            polled = clock.monotonic()
            got = await policy.poll(run)
            if got is not None:
                got = await _settled(run, policy, got, cancel, clock, refused, progress.said)
                if got is not None:
                    return got  # nothing may follow the grant's last check
            if run.error is None:
                refused = clock.monotonic()
                metrics.record("awsflock.acquire.polls", 1, run.lock_id, run.store)
            if policy.again_now(run):
                continue
            if run.error is None:
                progress.refused()
            pause = _pause(run, policy, polled, deadline, clock=clock, rng=rng, skew=skew)
            if pause is None:
                break
            if run.error is not None:
                log_retry(run)
            else:
                await policy.waiting(run)
            if waker is None:
                waker = run.store.waker(run.lock_id)  # only a wait that pauses makes one
            # A wake ends the pause early: the next poll goes at once, as a step like any other.
            await waker.pause(clock, pause, cancel)  # a cancel is checked at the top of the loop
        await run.abandon()
        if run.error is not None:
            raise run.error
        raise busy_error(run, clock)
    except BaseException:
        await finish(lambda: _give_up_all(run, policy))  # sync: _give_up_all(run, policy)
        raise
    finally:
        if waker is not None:
            waker.close()


async def _settled(
    run: Acquisition,
    policy: Policy,
    got: Grant,
    cancel: threading.Event | None,
    clock: AsyncClock,
    refused: float | None,
    contended: bool,
) -> Grant | None:
    """A poll's grant once settled (``settle``, the policy tidying up), with whether the wait
    said it waited (``contended``) and how long after the last refusal (``refused``) its
    answer came; None if it was too stale (the wait goes on). Saying it is the caller's."""
    answered = clock.monotonic()
    # Tidying up may take a request timeout: before the grant is judged fresh.
    settled = await settle(run, got, cancel, tidy=lambda: policy.tidy(run))
    if settled is None:
        return None
    handoff = None if refused is None else answered - refused
    return dataclasses.replace(settled, contended=contended, handoff=handoff)


def _pause(
    run: Acquisition,
    policy: Policy,
    polled: float,
    deadline: float | None,
    *,
    clock: AsyncClock,
    rng: random.Random,
    skew: float,
) -> float | None:
    """The pause before the next poll (None: give up now), as ``next_pause`` says for the
    policy's holder; a policy's polls that are spaced from their starts (``polled``) take
    off the time the last one took."""
    pause = next_pause(policy.wake_for(run), deadline, clock=clock, rng=rng, skew=skew)
    if pause is not None and policy.spaced:
        pause = max(0.0, pause - (clock.monotonic() - polled))
    return pause


async def settle(
    run: Acquisition,
    got: Grant,
    cancel: threading.Event | None,
    tidy: Tidy | None = None,
) -> Grant | None:
    """A grant, once the other attempts are cleaned up (and ``tidy`` done: leaving a line),
    with the lock's state where it was asked for (``awsflock.state``): given back if cancelled
    meanwhile (raising Cancelled), if the clean-up is interrupted
    (an exception, a task's cancellation: it is given back before that goes on), or if too
    little of it is left once all that took its time (None: the wait goes on)."""
    try:
        await run.abandon(keep=got.lease_id)
        if tidy is not None:
            await tidy()
        if run.terms.state:  # read right after the grant: exact (only its holder writes)
            got = dataclasses.replace(got, state=await run.store.read_state(run.lock_id))
    except BaseException:
        await finish(lambda: run.give_back(got))  # sync: run.give_back(got)
        raise
    if cancel is not None and cancel.is_set():
        await run.give_back(got)
        check_cancel(cancel, "just as the lock was granted")
    return await run.still_fresh(got)


async def _give_up_all(run: Acquisition, policy: Policy) -> None:
    """A wait that ends without a grant: every attempt released, the policy tidied up."""
    await run.abandon()
    await policy.tidy(run)
