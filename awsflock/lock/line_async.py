"""Fair waiting (``--fair``): a line of waiters kept in the lock's record, served in order.

A fair acquire first tries as any acquire does (one request when the lock is free and nobody
waits in line). Held, it joins the line: the store hands out numbers one by one, so the line is
in order of arrival whatever the clocks say. Each poll (about once a second, jittered) is a
``beat`` that marks the place alive and returns the lock's state; the waiter at the head of the
line (no live place with a lower number) takes the lock as soon as a poll shows it free, and
its place leaves the line in the same write. Acquires without ``--fair`` take no place, and the
store refuses them while anyone in line polled lately.

A place lapses when its waiter stops polling: a waiter that saw a place unchanged for
``LINE_LAPSE_MS`` of its own monotonic time removes it, only if it is still unchanged (so a
slow but live waiter keeps its place, and the judgement needs no clock agreement). A waiter
whose place lapsed while it lived (paused, cut off) notices and joins again at the end.

``Fair`` is this as a waiting policy: the engine (``awsflock.lock.waiting.wait``) keeps the
clean-up; on every exit the place leaves the line (or, if that request fails, lapses).
"""

from __future__ import annotations

import logging
import random
import secrets
from collections.abc import Awaitable
from typing import Callable

from awsflock import errors, metrics
from awsflock.clock_async import AsyncClock
from awsflock.lock.acquisition_async import Acquisition
from awsflock.lock.grants import Grant
from awsflock.lock.telling import NOTICE
from awsflock.lock.waiting_async import Policy
from awsflock.protocol import LINE_LAPSE_MS, MAX_DROPS, MIN_TRY, Drops, Outcome
from awsflock.records import Line, LockRecord, Waiter
from awsflock.text import format_seconds, iso_utc

log = logging.getLogger("awsflock.lease")

#: The place message names at most this many waiters ahead.
NAMES_SHOWN = 5


def new_ticket(rng: random.Random | None = None) -> str:
    """A place's ticket: 16 hex digits (from the seeded source in a simulation)."""
    return f"{rng.getrandbits(64):016x}" if rng is not None else secrets.token_hex(8)


class Place:
    """This waiter's place in the lock's line, and what it has watched of the others."""

    def __init__(self, run: Acquisition, ticket: str) -> None:
        self.run = run
        self.ticket = ticket
        self.number: int | None = None
        #: Our place's last poll as the store has it (a beat always sends a later one).
        self.seen_ms = 0
        #: "out": no place; "in": holds one; "maybe": a join may have landed unanswered.
        self.state = "out"
        #: ticket -> (the last poll seen, when it was first seen: our monotonic time)
        self.watched: dict[str, tuple[int, float]] = {}
        self.shown: tuple[object, ...] | None = None

    @property
    def clock(self) -> AsyncClock:
        return self.run.clock

    def observe(self, line: Line) -> None:
        """Take in the line as an answer showed it."""
        now = self.clock.monotonic()
        watched = {}
        for waiter in line.waiters:
            seen = self.watched.get(waiter.ticket)
            keep = seen is not None and seen[0] == waiter.seen_ms
            watched[waiter.ticket] = seen if keep and seen else (waiter.seen_ms, now)
        self.watched = watched
        mine = line.find(self.ticket)
        if mine is not None:
            self.state, self.number, self.seen_ms = "in", mine.number, mine.seen_ms
        elif self.state == "maybe":
            self.state = "out"  # the join did not land (if it lands late, the place lapses)
        elif self.state == "in":
            self.state = "out"
            record = self.run.holder
            if self.number is not None and line.next_number <= self.number:
                why = "the lock's record was replaced (by awsflock 0.2.0, or deleted by TTL)"
            elif record is not None and record.legacy:
                why = "the lock's record was replaced by awsflock 0.2.0"
            else:
                why = (
                    f"no poll of ours arrived for {format_seconds(LINE_LAPSE_MS / 1000)}: "
                    "paused, or requests too slow"
                )
            log.warning(
                "lost the place in line for %r (%s); joining again at the end",
                self.run.lock_id,
                why,
                extra={"event": "lost_place", "lock_id": self.run.lock_id},
            )
            # A new ticket for the new place: a take sent under the old one that lands late
            # holds no place, even where a new record's numbering gave the old number again or
            # a join of the old ticket landed late (found by review 7), and is refused.
            self.ticket, self.number = new_ticket(self.run.rng), None
            self.run.own_ticket = self.ticket

    def lapsed(self, waiter: Waiter) -> bool:
        seen = self.watched.get(waiter.ticket)
        if seen is None or seen[0] != waiter.seen_ms:
            return False
        return self.clock.monotonic() - seen[1] >= LINE_LAPSE_MS / 1000

    def ahead(self) -> list[Waiter]:
        if self.number is None:
            return []
        return [w for w in self.run.line.waiters if w.number < self.number]

    def drops(self) -> Drops:
        """Lapsed places, to remove with our next write: ahead of ours (they hold us up) and
        behind it (so that no dead waiter's place outlives the line)."""
        lapsed = [w for w in self.run.line.waiters if w.ticket != self.ticket and self.lapsed(w)]
        # The oldest first, a bounded number per write: the rest go with the next polls.
        return tuple((w.ticket, w.seen_ms) for w in lapsed[:MAX_DROPS])

    def live_ahead(self) -> list[Waiter]:
        return [w for w in self.ahead() if not self.lapsed(w)]

    def at_head(self) -> bool:
        return self.state == "in" and not self.live_ahead()

    def tell(self) -> None:
        """Say our place and who is ahead, when that changed."""
        if self.state != "in":
            return
        ahead = self.live_ahead()
        holder = self.run.holder
        if holder is not None and holder.is_free(self.clock.time(), self.run.skew):
            holder = None
        held = holder is not None
        shown = (len(ahead), tuple(w.ticket for w in ahead), holder and holder.lease_id)
        if shown == self.shown:
            return
        self.shown = shown
        position = len(ahead) + 1
        metrics.record("awsflock.acquire.place", position, self.run.lock_id, self.run.store)
        parts: list[str] = []
        if held and holder is not None:
            since = holder.acquired_at
            parts.append(
                f"{holder.owner or 'unknown owner'} holding"
                + (f" since {iso_utc(since)[11:19]}" if since else "")
            )
        if ahead:
            names = [w.identity.owner or "?" for w in ahead[:NAMES_SHOWN]]
            more = len(ahead) - len(names)
            parts.append(
                f"{len(ahead)} waiting: " + ", ".join(names) + (f" and {more} more" if more else "")
            )
        log.log(
            NOTICE,
            "%s in line for %r%s",
            ordinal(position),
            self.run.lock_id,
            f" (ahead: {', '.join(parts)})" if parts else "",
            extra={
                "event": "in_line",
                "lock_id": self.run.lock_id,
                "position": position,
                "ahead": [w.identity.owner for w in ahead],
                "holder": holder.owner if held and holder is not None else None,
            },
        )


def ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


class Fair(Policy):
    """Waiting in line (``--fair``), as a policy of the engine (``waiting.wait``): out of line,
    a poll tries as any acquire does and joins the line if that fails; in line, it beats and
    takes once at the head with the lock free. Polls are spaced from their starts, so slow
    requests do not stretch the cadence toward the lapse (a waiter whose requests take over
    about 2 s still loses its place). The place leaves the line with a grant, and on every
    exit (``tidy``)."""

    spaced = True
    tells_holder = True  # the place message names the holder, and is said when it changes

    def __init__(self, run: Acquisition, ticket: str | None = None) -> None:
        self.place = Place(run, ticket or new_ticket())
        run.own_ticket = self.place.ticket

    async def poll(self, run: Acquisition) -> Grant | None:
        return await _poll(run, self.place)

    def again_now(self, run: Acquisition) -> bool:
        return False  # a pool's quick probes happen inside the poll, while nobody is in line

    def tell(self, run: Acquisition) -> None:
        self.place.tell()

    def wake_for(self, run: Acquisition) -> LockRecord | None:
        # The head wakes when the holder's lease can be reclaimed; the others poll as usual.
        place = self.place
        return run.holder if place.at_head() or place.state != "in" else None

    async def tidy(self, run: Acquisition) -> None:
        await _leave(run, self.place)


async def _poll(run: Acquisition, place: Place) -> Grant | None:
    """One poll: try or join while out of line; in line, beat, and take once at the head of
    the line with the lock free. A transient error is left in ``run.error``."""
    if place.state == "out":
        run.ticket, run.number, run.drop = None, None, ()
        got = await run.step()
        # A pool probe that met a held slot while others are free and nobody waits probes again
        # at once, as an unfair acquire does: joining a line would only add requests.
        while got is None and run.wants_retry_now() and not run.line.waiters:
            got = await run.step()
        if got is not None or run.error is not None:
            return got
        place.observe(run.line)
        if not await _join(run, place):
            return None
    else:
        outcome = await _beat(run, place)
        if outcome is None:
            return None
        run.quick = 0  # in a pool, the head aims at a free slot (see Acquisition._look_pool)
        got = await run.look(outcome)
        if got is not None:
            # An earlier attempt of ours had landed; with our ticket, it took the place too.
            if outcome.line.find(place.ticket) is None:
                place.state = "out"
            return got
        place.observe(outcome.line)
        if place.state == "out":
            return None
    if not (place.at_head() and run.free()):
        return None
    run.ticket, run.number, run.drop = place.ticket, place.number, place.drops()
    got = await run.step()
    if got is not None and run.line.find(place.ticket) is None:
        place.state = "out"  # the place left the line with the take
    elif run.error is None:
        place.observe(run.line)
    return got


async def _join(run: Acquisition, place: Place) -> bool:
    """Take a place at the end of the line; True once in it (False: the record is gone, and
    the next poll tries to take the lock)."""
    now_ms = round(run.clock.time() * 1000)
    waiter = Waiter(place.ticket, 0, run.identity, since_ms=now_ms, seen_ms=now_ms)
    # From the moment it is sent, the join may land: a wait that ends before its answer (a
    # cancellation, an error) leaves the place it may have taken (``tidy``).
    place.state = "maybe"
    outcome = await _send(run, place, lambda: run.store.join(run.lock_id, waiter), maybe="maybe")
    if outcome is None:
        return False
    await run.look(outcome)
    place.observe(outcome.line)  # a retry whose first try landed finds the place there too
    if place.state == "in":
        log.debug(
            "joined the line for %r as number %d",
            run.lock_id,
            place.number,
            extra={"event": "joined_line", "lock_id": run.lock_id},
        )
    return place.state == "in"


async def _beat(run: Acquisition, place: Place) -> Outcome | None:
    # Always later than the place's last poll, even if our clock stepped back.
    now_ms = max(round(run.clock.time() * 1000), place.seen_ms + 1)
    drop = place.drops()
    outcome = await _send(
        run, place, lambda: run.store.beat(run.lock_id, place.ticket, now_ms=now_ms, drop=drop)
    )
    if outcome is not None and not outcome.applied and drop and outcome.line.find(place.ticket):
        # A place we took for lapsed polled after all: beat without removing anything.
        outcome = await _send(
            run, place, lambda: run.store.beat(run.lock_id, place.ticket, now_ms=now_ms)
        )
    return outcome


async def _send(
    run: Acquisition,
    place: Place,
    call: Callable[[], Awaitable[Outcome]],  # sync: call: Callable[[], Outcome],
    maybe: str | None = None,
) -> Outcome | None:
    """One line request within the acquire's bounds; a transient error is left in
    ``run.error`` (and a join that may have landed leaves the place "maybe")."""
    try:
        with run.store.budget(run.attempt_end()):
            outcome: Outcome = await call()
    except (errors.Throttled, errors.EndpointUnreachable) as err:
        run.error = err
        if maybe is not None:
            place.state = maybe if err.maybe_applied else "out"
        return None
    run.error = None
    return outcome


async def _leave(run: Acquisition, place: Place) -> None:
    """Leave the line, if we may be in it. A failure leaves a place that lapses by itself."""
    if place.state == "out":
        return
    end = run.clock.monotonic() + run.store.request_timeout
    if run.hard_end is not None:
        end = min(end, run.hard_end)
    if end - run.clock.monotonic() < MIN_TRY + run.grace:
        return
    try:
        with run.store.budget(end):
            await run.store.leave(run.lock_id, place.ticket)
        place.state = "out"
    except errors.AwsflockError as err:
        log.debug(
            "leaving the line for %r failed (%s); the place lapses in %s",
            run.lock_id,
            err.one_line(),
            format_seconds(LINE_LAPSE_MS / 1000),
        )
