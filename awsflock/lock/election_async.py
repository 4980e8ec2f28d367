"""Leader election: ``table.election(name, lease=15)``, a lock held by one process at a time,
whose fencing token numbers the terms.

``run(lead)`` campaigns (waits for the lock), calls ``lead(term)`` while this process leads,
and campaigns again when the term ends: ``lead`` returned (it resigned), or the lease was lost
(refused, or not confirmed in time). With asyncio a lost lease cancels ``lead`` (the lock's
block does), and the lock is released only once ``lead`` has stopped; a synchronous ``lead``
cannot be stopped from outside and must watch ``term.lost`` (or call ``term.check()``) and
return. ``term.fencing_token`` is above every earlier term's: what downstream writes carry, so
that a paused leader's late write is refused. ``leader()`` says who leads now.

While it campaigns it looks at the lock about once a second (``POLL``): another process's new
term is told to ``on_new_leader(record)`` as soon as it is seen (None: nobody leads); this
process's own terms are told to ``on_started(term)`` and ``on_stopped(term, error)``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from awsflock import errors
from awsflock.records import LockRecord

log = logging.getLogger("awsflock.election")

#: How long one campaign try waits for the lock before looking who leads (seconds).
POLL = 1.0


@dataclass
class Term:
    """One term of this process as the leader: its lease, and whether it still holds."""

    name: str
    fencing_token: int | None
    lease_id: str
    hold: Any = field(repr=False)
    #: Set once the term's lease is lost (or the election is stopped: ``stopping``).
    lost: threading.Event = field(repr=False, default_factory=threading.Event)
    #: Set when ``stop`` (the election's) asks every term to end.
    stopping: threading.Event | None = field(repr=False, default=None)

    def check(self) -> None:
        """Raise ``LeaseLost`` if the term's lease was lost, or is about to be."""
        self.hold.check()


class Election:
    """A campaign for leadership of ``name`` in ``table`` (a ``LockTable``: synchronous, or
    ``awsflock.aio``'s). Callbacks are called in the campaign's own thread or task."""

    def __init__(
        self,
        table: Any,
        name: str,
        *,
        lease: float | str = 15.0,
        on_started: Callable[[Term], Any] | None = None,
        on_stopped: Callable[[Term, BaseException | None], Any] | None = None,
        on_new_leader: Callable[[LockRecord | None], Any] | None = None,
    ) -> None:
        self.table = table
        self.name = name
        self.lease = lease
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.on_new_leader = on_new_leader
        self._seen: str | None = ""  # the lease id of the leader last told ("": none told)
        self.terms = 0

    async def leader(self) -> LockRecord | None:
        """Who leads now, as the store says: the holder's record (owner, host, fencing token),
        or None when nobody does (never held, released, or its lease ran out)."""
        state = await self.table.state(self.name)
        if not isinstance(state, LockRecord) or state.released:
            return None
        return None if state.is_expired(self.table.clock.time()) else state

    async def run(self, lead: Callable[[Term], Any], stop: threading.Event | None = None) -> None:
        """Lead whenever this process wins, for ever (until cancelled, or ``stop`` is set):
        campaign, ``lead(term)``, campaign again."""
        while stop is None or not stop.is_set():
            hold = await self._campaign(stop)
            if hold is None:
                return
            await self._serve(hold, lead, stop)

    async def _campaign(self, stop: threading.Event | None) -> Any:
        """Wait for the lock; the started hold once won (None: ``stop`` was set)."""
        while stop is None or not stop.is_set():
            hold = self.table.lock(self.name, lease=self.lease, wait=POLL, cancel=stop)
            try:
                await hold.__aenter__()
            except errors.LockBusy as busy:
                self._tell(busy.holder)
                continue
            except (errors.Throttled, errors.EndpointUnreachable) as err:
                # The store out of reach: a standby keeps trying (the wait paced it).
                log.warning("campaign for %r: %s; still trying", self.name, err.one_line())
                continue
            except errors.Cancelled:
                return None
            return hold
        return None

    async def _serve(self, hold: Any, lead: Callable[[Term], Any], stop: Any) -> None:
        """One term: ``lead`` runs inside the lock's block (entered by ``_campaign``)."""
        term = Term(self.name, hold.fencing_token, hold.lease_id, hold, hold.lost, stop)
        self.terms += 1
        self._seen = hold.lease_id  # this process's own terms are told to on_started
        log.info("leading %r, term %s", self.name, term.fencing_token)
        ended: BaseException | None = None
        try:
            if self.on_started is not None:
                self.on_started(term)
            await lead(term)
        except BaseException as exc:
            ended = exc
        try:
            if ended is None:
                await hold.__aexit__(None, None, None)
            else:
                await hold.__aexit__(type(ended), ended, ended.__traceback__)
        except errors.LeaseLost as lost:
            ended = lost
            log.warning("lost the lead of %r: %s", self.name, lost.message)
        finally:
            if self.on_stopped is not None:
                self.on_stopped(term, ended)
        if ended is not None and not isinstance(ended, errors.LeaseLost):
            raise ended  # lead's own error, a cancellation: the election ends with it

    def _tell(self, holder: LockRecord | None) -> None:
        """Tell ``on_new_leader`` of a leader not told before (None: nobody leads)."""
        lease_id = None if holder is None or holder.released else holder.lease_id
        if lease_id == self._seen:
            return
        self._seen = lease_id
        if self.on_new_leader is not None:
            self.on_new_leader(holder if lease_id is not None else None)


class Elections:
    """The elections of ``LockTable`` (``awsflock.lock.table``), which this is mixed into."""

    def election(
        self,
        name: str,
        *,
        lease: float | str = 15.0,
        on_started: Callable[[Term], Any] | None = None,
        on_stopped: Callable[[Term, BaseException | None], Any] | None = None,
        on_new_leader: Callable[[LockRecord | None], Any] | None = None,
    ) -> Election:
        """A campaign for leadership of ``name``: ``election.run(lead)`` calls ``lead(term)``
        while this process leads, and campaigns again when the term ends; ``election.leader()``
        says who leads now. With asyncio a lost lease cancels ``lead``; a synchronous ``lead``
        cannot be interrupted and watches ``term.lost``."""
        return Election(
            self,
            name,
            lease=lease,
            on_started=on_started,
            on_stopped=on_stopped,
            on_new_leader=on_new_leader,
        )
