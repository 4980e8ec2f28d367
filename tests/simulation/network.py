"""The network as a simulated process reaches its store: requests that travel, get lost, land
late; and the tap through which the checker sees what each process asked of its store.

Every process has a store of its own, the real one of its kind (``attach``), and the faults
sit beneath that store's request code, where its tries meet the wire:

- PostgreSQL and Redis: a ``links.FaultyLink`` handed to the real ``PostgresStore`` /
  ``RedisStore`` in place of its link; the real ``Connected`` (its gate, its connection) and
  the real error translation run, in virtual time (``links.SimTime``);
- DynamoDB (in-process moto): a ``boto.FaultyClient`` in place of its botocore client, so a
  step of several calls meets faults between them, and the real ``translate_errors`` reads
  botocore's exceptions;
- the in-memory store, which has no network code: a fault layer of its own
  (``memory.FaultyMemory``) beneath the production request layer.

Each try meets one fault drawn from the seeded random source when it begins:

- ``refused``: never sent (connection refused: certainly not applied);
- ``lost``: sent, lost before it applies (the client sees a timeout: maybe applied);
- ``answer_lost``: applied, its answer lost (a timeout);
- ``late``: held up in the network and applied later, after the client gave up on it (and
  after its later requests, possibly);
- ``throttled``: refused by the store (not applied);
- and in an outage window (``Network.outage``) every try is refused or lost.

Besides, a try may be *stalled* before it is sent: its process paused (a GC pause, SIGSTOP)
between the request layer's decision and the wire, so that its deadline passes; the gate must
then keep it from being sent. Requests and answers take a little virtual time, during which
every other thread may run.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from typing import Any, Callable

from awsflock.protocol import MIN_TRY, Attempt, LockStore
from awsflock.records import Waiter
from tests.simulation.world import Killed, Proc, SimThread, World


class TryState:
    """The fault, deadline and end (``until``) of the try under way, for the thread making it:
    a store's tries from several threads overlap (each on a connection of its own, or in a
    worker thread), so one try's must never be read as another's."""

    def __init__(self) -> None:
        self._try = threading.local()

    @property
    def fault(self) -> str:
        return str(getattr(self._try, "fault", "ok"))

    @fault.setter
    def fault(self, value: str) -> None:
        self._try.fault = value

    @property
    def deadline(self) -> float:
        return float(getattr(self._try, "deadline", 0.0))

    @deadline.setter
    def deadline(self, value: float) -> None:
        self._try.deadline = value

    @property
    def until(self) -> float:
        return float(getattr(self._try, "until", 0.0))

    @until.setter
    def until(self, value: float) -> None:
        self._try.until = value


@dataclass
class Faults:
    """How often each fault meets a try (the rest are answered normally)."""

    refused: float = 0.02
    lost: float = 0.02
    answer_lost: float = 0.03
    late: float = 0.02
    throttled: float = 0.01
    #: How often a try is stalled before it is sent, and for how long (seconds, uniform).
    stall: float = 0.01
    stall_for: tuple[float, float] = (0.5, 20.0)
    #: How long a request or an answer travels (seconds, uniform).
    latency: tuple[float, float] = (0.001, 0.05)
    #: How much later a late request lands.
    late_by: tuple[float, float] = (0.5, 60.0)

    @classmethod
    def none(cls) -> Faults:
        return cls(0, 0, 0, 0, 0, 0)


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
        """The fault the try beginning now meets."""
        self.tries += 1
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

    def stall(self, proc: Proc, what: str) -> None:
        """Now and then, pause ``proc`` here, on a try's way to the wire (then yield)."""
        world = self.world
        if world.rng.random() < self.faults.stall:
            length = world.rng.uniform(*self.faults.stall_for)
            proc.paused_until = max(proc.paused_until, world.now + length)
            world.note(f"pause {proc.name} for {length:.1f}s before it sends {what}")
            world.block(wake_at=world.now)

    def late(self) -> float:
        """When a request held up now lands."""
        low, high = self.faults.late_by
        return self.world.now + self.world.rng.uniform(low, high)


@dataclass
class Call:
    """One call of the lock interface, as the checker names it: the operation, its arguments
    (positional ones, then a dict of the keyword ones), and the true time it was made (when
    the readings it carries were taken)."""

    operation: str
    args: tuple[Any, ...]
    made: float


#: The interface's names the checker knows the operations by.
OPERATIONS = {"resize_pool": "resize"}
#: What the tap passes through unnoted: set-up and what is not a call of the store.
UNNOTED = {"create", "actor", "where", "close", "waker", "budget", "step", "applied"}


class Tap:
    """A process's store as its ``LockTable`` sees it: the store itself, each call of its
    interface noted (``current``) for the fault layer beneath, which shows the checker each
    step the store applies with the call it came from. Nothing is restated: every attribute
    is the store's."""

    def __init__(self, store: Any, world: World, proc: Proc, watcher: Any) -> None:
        self.store = store
        self.world = world
        self.proc = proc
        self.watcher = watcher
        self._local = threading.local()
        #: The lease ids whose release is on its way now (a call not returned).
        self.releasing: list[str] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.store, name)
        if name.startswith("_") or name in UNNOTED or not callable(value):
            return value
        reference = getattr(LockStore, name, None)

        def noted(*args: Any, **kw: Any) -> Any:
            call = _call(OPERATIONS.get(name, name), reference, args, kw, self.world)
            self._local.call = call
            if call.operation == "release":
                ids = [call.args[1]]
            elif call.operation == "release_all":  # a set's: each member's lease
                ids = [lease_id for _, lease_id in call.args[0]]
            else:
                return value(*args, **kw)
            self.releasing.extend(ids)
            try:
                return value(*args, **kw)
            finally:
                for lease_id in ids:
                    self.releasing.remove(lease_id)

        return noted

    def legacy(self, operation: str, *args: Any, **kw: Any) -> Any:
        """A request of the awsflock 0.2.0 model (the store's ``legacy_*``)."""
        self._local.call = Call(f"legacy_{operation}", args, self.world.now)
        return getattr(self.store, f"legacy_{operation}")(*args, **kw)

    def current(self) -> Call:
        """The call this thread is making."""
        call: Call | None = getattr(self._local, "call", None)
        return call if call is not None else Call("?", (), self.world.now)

    # -- what the fault layers beneath call ---------------------------------------------------

    def starting(self, what: str, tries: int, end: float) -> None:
        """The request layer starts a try of a call whose budget runs out at ``end``: a retry
        must have ``MIN_TRY`` of it left (whatever pause came in its backoff)."""
        now = self.proc.clock.monotonic()
        if self.watcher is not None and tries > 1 and now + MIN_TRY > end:
            self.watcher.fail(
                f"{self.proc.name} sent {what} try {tries} with its budget spent "
                f"({end - now:.2f}s left): a request made of readings older than the caller "
                "allows"
            )

    def sending(self, what: str, tries: int, deadline: float) -> None:
        """A try is about to leave; ``deadline``: its own, past which the gate must have kept
        it back. Raises Killed in a killed process (it sends nothing more)."""
        thread = threading.current_thread()
        if isinstance(thread, SimThread) and thread.proc.killed:
            raise Killed
        now = self.proc.clock.monotonic()
        if self.watcher is not None and now >= deadline:
            self.watcher.fail(
                f"{self.proc.name} sent {what} try {tries} {now - deadline:.2f}s after its "
                "deadline: a try given up was sent late (the gate let it through)"
            )

    def apply(self, call: Call, apply: Callable[[], Any], decode: Callable[[Any], Any]) -> Any:
        """Apply one try of ``call`` at the store (``apply``); the checker sees the state
        before and the step's answer (``decode``: the answer as the interface gives it)."""
        if self.watcher is None:
            return apply()
        before = self.watcher.before(call.operation, call.args)
        result = apply()
        self.watcher.applied(call.operation, call.args, decode(result), before, call.made)
        return result

    def land_late(self, call: Call, land: Callable[[], None]) -> None:
        """A try of ``call`` held up in the network lands now (``land`` applies it)."""
        self.world.note(f"{self.proc.name} {call.operation}{short(call.args)} lands late")
        if self.watcher is not None:
            self.watcher.landing_late = True
        try:
            land()
        finally:
            if self.watcher is not None:
                self.watcher.landing_late = False

    def note(self, call: Call, tries: int, fault: str) -> None:
        self.world.note(f"{self.proc.name} {call.operation}{short(call.args)} try {tries}: {fault}")


def _call(
    operation: str, reference: Any, args: tuple[Any, ...], kw: dict[str, Any], world: World
) -> Call:
    """The call as the checker reads it: ``LockStore``'s positional parameters, then its
    keyword-only ones in a dict (as they were passed, whichever way)."""
    if reference is not None:
        bound = inspect.signature(reference).bind(None, *args, **kw)
        params = inspect.signature(reference).parameters
        args, kw = (), {}
        for name, value in list(bound.arguments.items())[1:]:
            if params[name].kind is inspect.Parameter.KEYWORD_ONLY:
                kw[name] = value
            else:
                args += (value,)
    return Call(operation, args + ((kw,) if kw else ()), world.now)


def slot_of_call(call: Call) -> int | None:
    """The slot ``call`` is about."""
    for arg in call.args:
        if isinstance(arg, Attempt):
            return arg.slot
        if isinstance(arg, dict):
            slot: int | None = arg.get("slot")
            return slot
    return None


def short(args: tuple[Any, ...]) -> str:
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
