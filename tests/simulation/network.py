"""The store as a simulated process reaches it: requests that travel, get lost, land late.

``SimStore`` wraps a real ``LockStore`` (the in-memory one, or the DynamoDB store on in-process
moto) and is what every simulated client's ``LockTable`` talks to. It keeps the interface's
request contract the way the DynamoDB store's request layer does: each call is retried, with
backoff, within the caller's budget (``budget``; else one request timeout); a call that fails
says whether any try of it may have landed (``maybe_applied``), and an answered call whose
earlier try may still land says so (``Outcome.in_doubt``). Each try meets a fault drawn from the
seeded random source:

- ``refused``: never sent (connection refused: certainly not applied);
- ``lost``: sent, lost before it applies (the client sees a timeout: maybe applied);
- ``answer lost``: applied, its answer lost (a timeout);
- ``late``: held up in the network and applied later, after the client gave up on it (and
  after its later requests, possibly);
- ``throttled``: refused by the store (not applied);
- and in an outage window (``Network.outage``) every try is refused or lost.

Requests and answers take a little virtual time, during which every other thread may run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable

from awsflock import errors
from awsflock.protocol import MIN_TRY, Attempt, LockStore, Outcome
from awsflock.records import Waiter
from awsflock.stores import retrying
from awsflock.stores.retrying import backoff, retry_fits
from tests.simulation.world import Killed, SimThread, World


@dataclass
class Faults:
    """How often each fault meets a try (the rest are answered normally)."""

    refused: float = 0.02
    lost: float = 0.02
    answer_lost: float = 0.03
    late: float = 0.02
    throttled: float = 0.01
    #: How long a request or an answer travels (seconds, uniform).
    latency: tuple[float, float] = (0.001, 0.05)
    #: How much later a late request lands.
    late_by: tuple[float, float] = (0.5, 60.0)

    @classmethod
    def none(cls) -> Faults:
        return cls(0, 0, 0, 0, 0)


class Network:
    """Faults and outages, shared by every client."""

    def __init__(self, world: World, faults: Faults) -> None:
        self.world = world
        self.faults = faults
        #: (start, end, kind): every try in [start, end) is "refused" or "lost".
        self.outages: list[tuple[float, float, str]] = []
        self.tries = 0

    def outage(self, start: float, length: float, kind: str) -> None:
        self.outages.append((start, start + length, kind))

    def draw(self) -> str:
        now = self.world.now
        for start, end, kind in self.outages:
            if start <= now < end:
                return kind
        f, x = self.faults, self.world.rng.random()
        for kind, p in (
            ("refused", f.refused),
            ("lost", f.lost),
            ("answer_lost", f.answer_lost),
            ("late", f.late),
            ("throttled", f.throttled),
        ):
            if x < p:
                return kind
            x -= p
        return "ok"

    def travel(self) -> None:
        low, high = self.faults.latency
        self.world.block(wake_at=self.world.now + self.world.rng.uniform(low, high))


class SimStore:
    """A ``LockStore`` seen through the simulated network, for one process."""

    def __init__(
        self, inner: LockStore, network: Network, proc_name: str, request_timeout: float = 5.0
    ) -> None:
        self.inner = inner
        self.network = network
        self.world = network.world
        self.proc_name = proc_name
        self.table_name = inner.table_name
        self.skew_free: bool = inner.skew_free
        self.request_timeout = request_timeout
        self.clock: Any = None  # set to the process's clock by the caller
        self._local = threading.local()
        #: Sees every step the store applies, with the state before it (the checker).
        self.watcher: Any = None

    def where(self) -> str:
        return "the simulated store"

    @contextmanager
    def budget(self, end: float) -> Iterator[None]:
        outer = getattr(self._local, "end", None)
        self._local.end = end if outer is None else min(outer, end)
        try:
            yield
        finally:
            self._local.end = outer

    # -- the request layer ---------------------------------------------------------------------

    def _send(self, operation: str, args: tuple[Any, ...], apply: Callable[[], Any]) -> Any:
        thread = threading.current_thread()
        assert isinstance(thread, SimThread)
        # A pause of the process may fall anywhere: between reading the clock and sending,
        # inside the retry loop, while a try is on its way (a request carries the time it was
        # made, and the protocol must hold however late it lands).
        return self._tries(operation, args, apply, thread)

    def _tries(
        self, operation: str, args: tuple[Any, ...], apply: Callable[[], Any], thread: SimThread
    ) -> Any:
        world, network = self.world, self.network
        start = world.now
        end = getattr(self._local, "end", None)
        if end is None:
            end = self.clock.monotonic() + self.request_timeout
        end_true = start + (end - self.clock.monotonic())
        doubt = False
        tries = 0
        while True:
            tries += 1
            if thread.proc.killed:
                raise Killed
            if tries > 1 and world.now + MIN_TRY > end_true and self.watcher is not None:
                self.watcher.fail(
                    f"{self.proc_name} sent {operation} try {tries} with its budget spent "
                    f"({end_true - world.now:.2f}s left): a request made of readings older "
                    "than the caller allows"
                )
            timeout = max(MIN_TRY, min(self.request_timeout, end_true - world.now))
            sent_at = world.now
            fault = network.draw()
            network.tries += 1
            world.note(f"{self.proc_name} {operation}{_short(args)} try {tries}: {fault}")
            maybe = fault in ("lost", "answer_lost", "late")
            if fault in ("refused", "throttled"):
                network.travel()
            elif fault == "lost":
                world.block(wake_at=sent_at + timeout)
            elif fault == "late":
                low, high = network.faults.late_by
                when = world.now + world.rng.uniform(low, high)
                world.at(when, lambda: self._apply_late(operation, args, apply, start))
                world.block(wake_at=sent_at + timeout)
            else:
                network.travel()
                result = self._apply(operation, args, apply, start)
                if fault == "answer_lost":
                    world.block(wake_at=sent_at + timeout)
                else:
                    network.travel()
                    if doubt and isinstance(result, Outcome):
                        result = replace(result, in_doubt=True)
                    return result
            doubt = doubt or maybe
            error: errors.StoreError
            if fault == "throttled":
                error = errors.Throttled(f"the simulated store throttled {operation}")
            else:
                error = errors.EndpointUnreachable(f"the simulated store: {operation} {fault}")
            pause = backoff(tries, world.rng)
            if retry_fits(world.now + pause, end_true):
                world.block(wake_at=world.now + pause)
                # A pause of the process may have fallen in the backoff.
                if retrying.still_fits(world.now, end_true):
                    continue
            error.maybe_applied = doubt
            raise error

    def _apply(
        self, operation: str, args: tuple[Any, ...], apply: Callable[[], Any], made: float
    ) -> Any:
        """Apply one try; ``made``: the true time the call was made (its first try sent), which
        is when the times it carries (``now_ms``, a place's ``seen_ms``) were read."""
        if self.watcher is None:
            return apply()
        before = self.watcher.before(operation, args)
        result = apply()
        self.watcher.applied(operation, args, result, before, made)
        return result

    def _apply_late(
        self, operation: str, args: tuple[Any, ...], apply: Callable[[], Any], made: float
    ) -> None:
        self.world.note(f"{self.proc_name} {operation}{_short(args)} lands late")
        if self.watcher is not None:
            self.watcher.landing_late = True
        try:
            self._apply(operation, args, apply, made)
        finally:
            if self.watcher is not None:
                self.watcher.landing_late = False

    # -- the interface ------------------------------------------------------------------------

    def take(self, lock_id: str, attempt: Attempt) -> Outcome:
        args = (lock_id, attempt)
        return self._send("take", args, lambda: self.inner.take(lock_id, attempt))

    def renew(self, lock_id: str, lease_id: str, **kw: Any) -> Outcome:
        args = (lock_id, lease_id, kw)
        return self._send("renew", args, lambda: self.inner.renew(lock_id, lease_id, **kw))

    def release(self, lock_id: str, lease_id: str, **kw: Any) -> Outcome:
        args = (lock_id, lease_id, kw)
        return self._send("release", args, lambda: self.inner.release(lock_id, lease_id, **kw))

    def force_release(self, lock_id: str, lease_id: str, **kw: Any) -> Outcome:
        args = (lock_id, lease_id, kw)
        return self._send(
            "force_release", args, lambda: self.inner.force_release(lock_id, lease_id, **kw)
        )

    def join(self, lock_id: str, waiter: Any) -> Outcome:
        args = (lock_id, waiter)
        return self._send("join", args, lambda: self.inner.join(lock_id, waiter))

    def beat(self, lock_id: str, ticket: str, **kw: Any) -> Outcome:
        args = (lock_id, ticket, kw)
        return self._send("beat", args, lambda: self.inner.beat(lock_id, ticket, **kw))

    def leave(self, lock_id: str, ticket: str) -> Outcome:
        args = (lock_id, ticket)
        return self._send("leave", args, lambda: self.inner.leave(lock_id, ticket))

    def read(self, lock_id: str) -> Outcome:
        return self._send("read", (lock_id,), lambda: self.inner.read(lock_id))

    def locks(self, prefix: str = "") -> Iterator[Any]:
        return iter(self._send("locks", (prefix,), lambda: list(self.inner.locks(prefix))))

    def resize_pool(self, lock_id: str, old: int | None, new: int, **kw: Any) -> bool:
        args = (lock_id, old, new, kw)
        return self._send("resize", args, lambda: self.inner.resize_pool(lock_id, old, new, **kw))

    def put_audit(self, key: str, entry: dict[str, Any], *, replace: bool = True) -> None:
        self._send("put_audit", (key,), lambda: self.inner.put_audit(key, entry, replace=replace))

    def void_audit(self, key: str, action_id: str | None) -> None:
        self._send("void_audit", (key,), lambda: self.inner.void_audit(key, action_id))

    def audit_entries(self) -> Iterator[dict[str, Any]]:
        return iter(self._send("audit", (), lambda: list(self.inner.audit_entries())))

    def create(self, *, progress: Callable[[str], None] = lambda _m: None) -> bool:
        return self.inner.create(progress=progress)

    def actor(self) -> str | None:
        return None

    def legacy(self, operation: str, *args: Any, **kw: Any) -> Any:
        """A request of the awsflock 0.2.0 model (``MemoryStore.legacy_*``), through the same
        network: 0.2.0 relies on botocore's retries and tracks no doubt."""
        method = getattr(self.inner, f"legacy_{operation}")
        return self._send(f"legacy_{operation}", args, lambda: method(*args, **kw))


def _short(args: tuple[Any, ...]) -> str:
    parts = []
    for arg in args:
        if isinstance(arg, Attempt):
            parts.append(f"lease={arg.lease_id[:8]} slot={arg.slot}")
            if arg.ticket is not None:
                parts.append(f"ticket={arg.ticket[:8]}")
            if arg.drop:
                parts.append("drop=" + ",".join(t[:8] for t, _ in arg.drop))
        elif isinstance(arg, Waiter):
            parts.append(f"{arg.ticket[:8]} number={arg.number}")
        elif isinstance(arg, dict):
            if arg.get("slot") is not None:
                parts.append(f"slot={arg['slot']}")
            if arg.get("drop"):
                parts.append("drop=" + ",".join(t[:8] for t, _ in arg["drop"]))
        elif isinstance(arg, str) and len(arg) > 12:
            parts.append(arg[:8])
        else:
            parts.append(str(arg))
    return "(" + " ".join(parts) + ")"
