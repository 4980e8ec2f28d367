"""The store as a simulated process reaches it: requests that travel, get lost, land late.

``SimStore`` wraps a real ``LockStore`` (the in-memory one, the DynamoDB store on in-process
moto, or PostgreSQL) and is what every simulated client's ``LockTable`` talks to. Its request
layer is the production one (``stores.remote.requests.RetryingStore``): each call is retried,
with backoff, within the caller's budget (``budget``; else one request timeout); a call that
fails says whether any try of it may have landed (``maybe_applied``), and an answered call whose
earlier try may still land says so (``Outcome.in_doubt``). The faults are injected beneath it:
each try meets one drawn from the seeded random source:

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
from dataclasses import dataclass, replace
from typing import Any, Callable

from awsflock import errors
from awsflock.protocol import MIN_TRY, Attempt, LockStore, Outcome
from awsflock.records import Waiter
from awsflock.stores.remote.requests import RetryingStore
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


class SimStore(RetryingStore):
    """A ``LockStore`` seen through the simulated network, for one process. Its request layer
    is the production one (``RetryingStore._send``: budgets, backoff, retries, doubt per call
    and per step); only each try (``_attempt``) goes through the simulated network."""

    def __init__(
        self, inner: LockStore, network: Network, proc_name: str, request_timeout: float = 5.0
    ) -> None:
        self.inner = inner
        self.network = network
        self.world = network.world
        self.proc_name = proc_name
        self.table_name = inner.table_name
        self.kind = inner.kind
        self.skew_free: bool = inner.skew_free
        self.request_timeout = request_timeout
        self.clock: Any = None  # set to the process's clock by the caller
        self._local = threading.local()
        self._retry_rng = network.world.rng  # backoff jitter from the seeded source
        #: Sees every step the store applies, with the state before it (the checker).
        self.watcher: Any = None

    def where(self) -> str:
        return "the simulated store"

    # -- one try, through the network (the retries are the production request layer's) ------

    def _call(self, operation: str, args: tuple[Any, ...], apply: Callable[[], Any]) -> Any:
        """One call of the interface: ``apply`` made through ``_send``, as a network store
        makes its calls; an answer whose earlier try may still land says so."""
        self._local.made = self.world.now  # when the readings it carries were taken
        with self.step():
            result = self._send(operation, lambda: (args, apply))
            if isinstance(result, Outcome) and self._in_doubt():
                result = replace(result, in_doubt=True)
            return result

    def _attempt(self, operation: str, call: Callable[..., Any], timeout: float) -> Any:
        world, network = self.world, self.network
        thread = threading.current_thread()
        assert isinstance(thread, SimThread)
        if thread.proc.killed:
            raise Killed
        args, apply = call()
        tries = self._local.try_number
        end = self._local.call_end
        if tries > 1 and self.clock.monotonic() + MIN_TRY > end and self.watcher is not None:
            self.watcher.fail(
                f"{self.proc_name} sent {operation} try {tries} with its budget spent "
                f"({end - self.clock.monotonic():.2f}s left): a request made of readings older "
                "than the caller allows"
            )
        made = self._local.made
        sent_at = world.now
        fault = network.draw()
        network.tries += 1
        world.note(f"{self.proc_name} {operation}{_short(args)} try {tries}: {fault}")
        if fault in ("refused", "throttled"):
            network.travel()
        elif fault == "lost":
            world.block(wake_at=sent_at + timeout)
        elif fault == "late":
            low, high = network.faults.late_by
            when = world.now + world.rng.uniform(low, high)
            world.at(when, lambda: self._apply_late(operation, args, apply, made))
            world.block(wake_at=sent_at + timeout)
        else:
            network.travel()
            result = self._apply(operation, args, apply, made)
            if fault != "answer_lost":
                network.travel()
                return result
            world.block(wake_at=sent_at + timeout)
        error: errors.StoreError
        if fault == "throttled":
            error = errors.Throttled(f"the simulated store throttled {operation}")
        else:
            error = errors.EndpointUnreachable(f"the simulated store: {operation} {fault}")
        # Whether this try may have reached the store; the request layer then sets the call's.
        error.maybe_applied = fault in ("lost", "answer_lost", "late")
        raise error

    def _try_may_have_applied(self, err: errors.StoreError) -> bool:
        return err.maybe_applied

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
        return self._call("take", args, lambda: self.inner.take(lock_id, attempt))

    def renew(self, lock_id: str, lease_id: str, **kw: Any) -> Outcome:
        args = (lock_id, lease_id, kw)
        return self._call("renew", args, lambda: self.inner.renew(lock_id, lease_id, **kw))

    def release(self, lock_id: str, lease_id: str, **kw: Any) -> Outcome:
        args = (lock_id, lease_id, kw)
        return self._call("release", args, lambda: self.inner.release(lock_id, lease_id, **kw))

    def force_release(self, lock_id: str, lease_id: str, **kw: Any) -> Outcome:
        args = (lock_id, lease_id, kw)
        return self._call(
            "force_release", args, lambda: self.inner.force_release(lock_id, lease_id, **kw)
        )

    def join(self, lock_id: str, waiter: Any) -> Outcome:
        args = (lock_id, waiter)
        return self._call("join", args, lambda: self.inner.join(lock_id, waiter))

    def beat(self, lock_id: str, ticket: str, **kw: Any) -> Outcome:
        args = (lock_id, ticket, kw)
        return self._call("beat", args, lambda: self.inner.beat(lock_id, ticket, **kw))

    def leave(self, lock_id: str, ticket: str) -> Outcome:
        args = (lock_id, ticket)
        return self._call("leave", args, lambda: self.inner.leave(lock_id, ticket))

    def read(self, lock_id: str, lease_id: str | None = None) -> Outcome:
        return self._call("read", (lock_id,), lambda: self.inner.read(lock_id, lease_id))

    def locks(self, prefix: str = "") -> Iterator[Any]:
        return iter(self._call("locks", (prefix,), lambda: list(self.inner.locks(prefix))))

    def resize_pool(self, lock_id: str, old: int | None, new: int, **kw: Any) -> bool:
        args = (lock_id, old, new, kw)
        return self._call("resize", args, lambda: self.inner.resize_pool(lock_id, old, new, **kw))

    def put_audit(self, key: str, entry: dict[str, Any], *, replace: bool = True) -> None:
        self._call("put_audit", (key,), lambda: self.inner.put_audit(key, entry, replace=replace))

    def void_audit(self, key: str, action_id: str | None) -> None:
        self._call("void_audit", (key,), lambda: self.inner.void_audit(key, action_id))

    def audit_entries(self) -> Iterator[dict[str, Any]]:
        return iter(self._call("audit", (), lambda: list(self.inner.audit_entries())))

    def create(self, *, progress: Callable[[str], None] = lambda _m: None) -> bool:
        return self.inner.create(progress=progress)

    def actor(self) -> str | None:
        return None

    def legacy(self, operation: str, *args: Any, **kw: Any) -> Any:
        """A request of the awsflock 0.2.0 model (``MemoryStore.legacy_*``), through the same
        network: 0.2.0 relies on botocore's retries and tracks no doubt."""
        method = getattr(self.inner, f"legacy_{operation}")
        return self._call(f"legacy_{operation}", args, lambda: method(*args, **kw))


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
