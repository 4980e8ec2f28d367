# Made from facade_async.py by scripts/unasync: edit that file, then run scripts/unasync.
"""The ``LockStore`` of a store whose every lock step is one server-side call (PostgreSQL's
step function, Redis's script): the steps' parameters, one call each through the request
layer, and the answer read in the shared form (``answers``).

A backend gives a ``link`` whose ``step(conn, request)`` sends one step, and a ``program``
(``StepProgram``): the request a step sends and its reply in the shared form (and a set's
steps, ``awsflock.sets``, each one call too, where its kind holds sets). Both are plain
data in, data out, so an asynchronous transport sends the same requests and reads the same
replies. The calls that are not lock steps (scans, audit, set-up) are the backend's own.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Callable, Generic, Protocol, TypeVar

from awsflock import errors
from awsflock.names import slot_of
from awsflock.protocol import (
    AUDIT_PREFIX,
    MAX_DROPS,
    RENEW_ORDER_MS,
    Attempt,
    Drops,
    Outcome,
    audit_key,
)
from awsflock.records import (
    ENDED_FORCED,
    ENDED_RELEASED,
    Identity,
    LockRecord,
    Pool,
    Waiter,
    kept_audit,
)
from awsflock.sets import check_set_attempts, no_sets
from awsflock.shares import group_of, is_share_id
from awsflock.state import LockState, StateWrite, from_wire, write_params
from awsflock.state import check_plain as check_state_plain
from awsflock.stores import kinds
from awsflock.stores.remote import answers
from awsflock.stores.remote.connected import Connected
from awsflock.stores.remote.link import C

_S = TypeVar("_S")


class StepProgram(Protocol):
    """What a backend's steps send, and how their replies read."""

    def request(self, op: str, lock_id: str, params: dict[str, Any]) -> Any:
        """The request of step ``op`` (take, renew, end, join, beat, leave, read, resize) on
        ``lock_id`` with ``params`` (JSON-able; the ``LockStore`` method's arguments)."""
        ...

    def answer(self, reply: Any, lock_id: str) -> answers.Answer:
        """The server's ``reply`` to a step on ``lock_id``, in the shared form."""
        ...

    def request_all(self, op: str, steps: list[tuple[str, dict[str, Any]]]) -> Any:
        """The request of a set's step ``op`` (take_all, renew_all, end_all): each
        ``(lock_id, params)``'s take, renew or end in one call (``awsflock.sets``)."""
        ...

    def answer_all(self, reply: Any, lock_ids: list[str]) -> list[answers.Answer]:
        """The server's ``reply`` to a set's step, one answer per lock, in order."""
        ...


class StepLink(Protocol):
    """The one method a ``Link`` adds for a step store."""

    def step(self, conn: Any, request: Any, timeout: float) -> Any:
        """Send one step's ``request`` on ``conn`` within ``timeout``; the server's reply."""
        ...


class StepStore(Connected[C], Generic[C]):
    """A ``LockStore`` whose every lock step is one call of ``program`` sent by ``link``.
    ``server_time`` False: steps carry the caller's ``now_ms`` and ``skew_ms`` instead of the
    server's clock (for tests and simulations in virtual time)."""

    program: StepProgram
    server_time: bool
    #: The store's kind (``stores.kinds``), which declares its capabilities.
    kind: str
    #: The server's clock less the caller's monotonic clock (ms) when a try was sent, as the
    #: latest answer showed it: a time of the caller's as the server's (a claim's end). Too high
    #: by that answer's delay at most, so a claim may outlast its wait by that, never by more
    #: than its own length; never too low, which would end every claim before it lands (found
    #: by review 7: the least ever seen stayed low after a suspend or a server clock stepped).
    _server_ahead: float | None = None

    @property
    def skew_free(self) -> bool:
        """As its kind's (``kinds.Kind.skew_free``: the server's clock times the leases), unless
        the store is in its callers' time (``server_time`` False)."""
        return self.server_time and kinds.get(self.kind).skew_free

    def _call(self, operation: str, op: str, lock_id: str, params: dict[str, Any]) -> Outcome:
        """One step; its answer as an Outcome in the caller's clock."""
        request = self.program.request(op, lock_id, params)
        link: Any = self.link

        def call(conn: C) -> tuple[Any, int, float]:
            # The caller's wall and monotonic clocks, read together when this try is sent.
            wall_ms, mono = round(self.clock.time() * 1000), self.clock.monotonic()
            return link.step(conn, request, self._try_timeout()), wall_ms, mono

        reply, wall_ms, mono = self._send(operation, call)
        return self._outcome(self.program.answer(reply, lock_id), lock_id, params, wall_ms, mono)

    def _call_all(
        self, operation: str, op: str, steps: list[tuple[str, dict[str, Any]]]
    ) -> tuple[Outcome, ...]:
        """A set's step (``awsflock.sets``): one call; each lock's answer as an Outcome."""
        if not kinds.get(self.kind).sets:
            raise no_sets(self.where())
        request = self.program.request_all(op, steps)
        link: Any = self.link

        def call(conn: C) -> tuple[Any, int, float]:
            wall_ms, mono = round(self.clock.time() * 1000), self.clock.monotonic()
            return link.step(conn, request, self._try_timeout()), wall_ms, mono

        reply, wall_ms, mono = self._send(operation, call)
        found = self.program.answer_all(reply, [lock_id for lock_id, _ in steps])
        return tuple(
            self._outcome(answer, lock_id, params, wall_ms, mono)
            for answer, (lock_id, params) in zip(found, steps)
        )

    def _outcome(
        self,
        answer: answers.Answer,
        lock_id: str,
        params: dict[str, Any],
        wall_ms: int,
        mono: float,
    ) -> Outcome:
        """A step's answer on ``lock_id`` as an Outcome in the caller's clock (``wall_ms`` and
        ``mono``: the caller's clocks, read together when the answered try was sent)."""
        shift, to_mono = 0, None
        if self.server_time:
            shift = wall_ms - answer.now_ms
            # A lease's end on the caller's monotonic clock: when the try was sent plus what the
            # server had left of it, so no step of the caller's wall clock can stretch it.
            to_mono = mono - wall_ms / 1000
            self._server_ahead = answer.now_ms - mono * 1000
        slot = params.get("slot")
        outcome = answers.outcome(answer, lock_id, slot, shift, self._in_doubt(), to_mono)
        if answer.ended is not None:
            outcome = outcome.remembering(str(params["lease"]), answer.ended)
        return outcome

    def _clock(self, now_ms: int, skew_ms: int) -> dict[str, Any]:
        return {} if self.server_time else {"now": now_ms, "skew": skew_ms}

    def take(self, lock_id: str, attempt: Attempt) -> Outcome:
        op = _op("take", attempt.lease_id)
        return self._call("acquire", op, lock_id, self._take_params(attempt))

    def take_all(self, takes: Sequence[tuple[str, Attempt]]) -> tuple[Outcome, ...]:
        check_set_attempts(takes)
        steps = [(lock_id, self._take_params(attempt)) for lock_id, attempt in takes]
        return self._call_all("acquire", "take_all", steps)

    def renew_all(
        self,
        leases: Sequence[tuple[str, str]],
        *,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        keeper: str | None = None,
    ) -> tuple[Outcome, ...]:
        steps = [
            (lock_id, self._renew_params(lease_id, now_ms, lease_ms, skew_ms, None, keeper))
            for lock_id, lease_id in leases
        ]
        return self._call_all("renew", "renew_all", steps)

    def release_all(
        self, leases: Sequence[tuple[str, str]], *, now_ms: int, skew_ms: int
    ) -> tuple[Outcome, ...]:
        clock = self._clock(now_ms, skew_ms)
        steps = [
            (lock_id, {**clock, "lease": lease_id, "slot": None, "ended": ENDED_RELEASED})
            for lock_id, lease_id in leases
        ]
        return self._call_all("release", "end_all", steps)

    def _take_params(self, attempt: Attempt) -> dict[str, Any]:
        _check_drops(attempt.drop)
        if is_share_id(attempt.lease_id):
            return {
                **self._clock(attempt.now_ms, attempt.skew_ms),
                "lease": attempt.lease_id,
                "group": group_of(attempt.lease_id),
                "who": _who(attempt.identity),
                "lease_ms": attempt.lease_ms,
                "sent": attempt.now_ms,
            }
        return {
            **self._clock(attempt.now_ms, attempt.skew_ms),
            "lease": attempt.lease_id,
            "who": _who(attempt.identity),
            "lease_ms": attempt.lease_ms,
            "sent": attempt.now_ms,
            "slot": attempt.slot,
            "slots": attempt.slots,
            "ticket": attempt.ticket,
            "number": attempt.number,
            "drop": [list(d) for d in attempt.drop],
            # The holder's lock-delay and max-hold, recorded with its lease (a share takes
            # neither).
            "delay_ms": attempt.delay_ms,
            "max_hold_ms": attempt.max_hold_ms,
        }

    def renew(
        self,
        lock_id: str,
        lease_id: str,
        *,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        slot: int | None = None,
        keeper: str | None = None,
        state: StateWrite | None = None,
    ) -> Outcome:
        params = self._renew_params(lease_id, now_ms, lease_ms, skew_ms, slot, keeper)
        op = _op("renew", lease_id)
        if state is not None:  # its own step: a server's older step refuses it, not drops it
            check_state_plain(slot, is_share_id(lease_id))
            params.update(write_params(state))
            op = "renew_state"
        return self._call("renew", op, lock_id, params)

    def _renew_params(
        self,
        lease_id: str,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        slot: int | None,
        keeper: str | None,
    ) -> dict[str, Any]:
        return {
            **self._clock(now_ms, skew_ms),
            "lease": lease_id,
            "lease_ms": lease_ms,
            "sent": now_ms,
            "order": RENEW_ORDER_MS,
            "slot": slot,
            "keeper": keeper,
        }

    def release(
        self, lock_id: str, lease_id: str, *, now_ms: int, skew_ms: int, slot: int | None = None
    ) -> Outcome:
        params = {**self._clock(now_ms, skew_ms), "lease": lease_id, "slot": slot}
        params["ended"] = ENDED_RELEASED
        return self._call("release", _op("end", lease_id), lock_id, params)

    def force_release(
        self,
        lock_id: str,
        lease_id: str,
        *,
        force_id: str,
        now_ms: int,
        skew_ms: int,
        actor: str,
        reason: str,
        slot: int | None = None,
        audit: dict[str, Any] | None = None,
    ) -> Outcome:
        params = {
            **self._clock(now_ms, skew_ms),
            "lease": lease_id,
            "slot": slot,
            "ended": ENDED_FORCED + force_id,
            "forced_by": actor,
            "forced_reason": reason,
        }
        if audit is not None:  # written by the step itself, applied (protocol.force_release)
            params["audit"] = {"key": audit_key(lease_id), "entry": kept_audit(audit)}
        return self._call("force_release", _op("end", lease_id), lock_id, params)

    def claim(self, lock_id: str, *, now_ms: int, until_ms: int) -> Outcome:
        """A waiting exclusive acquire's claim (``awsflock.shares``): for as long from the
        step's time as ``until_ms`` is from the caller's ``now_ms``; on the server's clock, never
        past ``until_ms`` as the server's clock reads it (``until``: a claim that lands late
        must not outlast the wait it was made for)."""
        params = {**self._clock(now_ms, 0), "for": until_ms - now_ms}
        if self.server_time and self._server_ahead is not None:
            until_mono = self.clock.monotonic() + (until_ms - now_ms) / 1000
            params["until"] = round(until_mono * 1000 + self._server_ahead)
        return self._call("claim", "claim", lock_id, params)

    def join(self, lock_id: str, waiter: Waiter) -> Outcome:
        params: dict[str, Any] = {
            "ticket": waiter.ticket,
            "who": dataclasses.asdict(waiter.identity),
        }
        if not self.server_time:
            params.update(now=waiter.seen_ms, since=waiter.since_ms)
        return self._call("join", "join", lock_id, params)

    def beat(self, lock_id: str, ticket: str, *, now_ms: int, drop: Drops = ()) -> Outcome:
        _check_drops(drop)
        params = {**self._clock(now_ms, 0), "ticket": ticket, "drop": [list(d) for d in drop]}
        return self._call("beat", "beat", lock_id, params)

    def leave(self, lock_id: str, ticket: str) -> Outcome:
        return self._call("leave", "leave", lock_id, {"ticket": ticket})

    def read(self, lock_id: str, lease_id: str | None = None) -> Outcome:
        if lease_id is None:
            return self._call("get", "read", lock_id, {})
        return self._call("get", "read", lock_id, {"lease": lease_id, "slot": slot_of(lease_id)})

    def read_state(self, lock_id: str) -> LockState:
        request = self.program.request("state", lock_id, {})
        link: Any = self.link

        def call(conn: C) -> Any:
            return link.step(conn, request, self._try_timeout())

        return from_wire(self.program.answer(self._send("get", call), lock_id).state)

    def resize_pool(
        self,
        lock_id: str,
        old: int | None,
        new: int,
        *,
        now_ms: int,
        skew_ms: int,
        seen: Pool | None = None,
        resize_id: str = "",
    ) -> bool:
        params = {**self._clock(now_ms, skew_ms), "old": old, "new": new}
        return (self._call("resize", "resize", lock_id, params)).applied


def listed(outcomes: Iterable[Outcome]) -> Iterator[LockRecord | Pool]:
    """What ``locks`` yields of each lock's outcome: its pool, or its record."""
    for outcome in outcomes:
        if outcome.pool is not None:
            yield outcome.pool
        elif outcome.lock is not None:
            yield outcome.lock


def check_audit_key(key: str) -> None:
    if not key.startswith(AUDIT_PREFIX):
        raise errors.UsageError(f"audit key {key!r} is not under {AUDIT_PREFIX!r}")


def opened(cls: Callable[..., _S], url: str, table: str | None, settings: Any) -> _S:
    """A step store of class ``cls`` as its kind opens it (``stores.kinds.Settings``); with
    ``server_time`` False in its ``extra``, its steps are timed by the callers' clocks instead
    of the server's (simulations in virtual time)."""
    return cls(
        url,
        table,
        request_timeout=settings.request_timeout,
        clock=settings.clock,
        server_time=bool(settings.extra.get("server_time", True)),
    )


def _op(step: str, lease_id: str) -> str:
    """The step function's name of ``step`` for ``lease_id``: a share's has its own."""
    return f"{step}_share" if is_share_id(lease_id) else step


def _check_drops(drop: Drops) -> None:
    if len(drop) > MAX_DROPS:
        raise errors.UsageError(f"{len(drop)} places to drop at once; at most {MAX_DROPS}")


def _who(identity: Identity) -> dict[str, Any]:
    """``identity``'s fields, as a new dict (a process sends the same one with every take)."""
    return dict(_fields(identity))


@functools.lru_cache(maxsize=64)
def _fields(identity: Identity) -> dict[str, Any]:
    return dataclasses.asdict(identity)
