"""Faults beneath the real PostgreSQL and Redis stores: each process's store is the real
``PostgresStore`` / ``RedisStore``, its request code (``stores.remote``: retries, doubt, the one
connection, the gate) and its error translation unchanged, with two things swapped in:

- ``FaultyLink`` for its link: a connection is virtual (``FaultyConn``); each try meets the
  fault drawn when it began, and raises what the driver raises for it (``DriverErrors``:
  psycopg's or redis-py's exceptions), which the real ``translate`` reads. What a try applies
  it applies with the real link's ``step`` on a real connection to the server (``RealConns``),
  the checker watching (``network.Tap``). A late try lands on a real connection of its own.
- ``SimTime`` for its ``try_time``: deadlines on the process's clock, the wait for the
  connection and for a connect in virtual time, a connect in a simulated thread, and no
  watchdog (a virtual try never outlives its deadline: every fault ends within its timeout).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable

from awsflock.stores.remote import answers
from awsflock.stores.remote.connected import TRY_GRACE
from tests.simulation.checker import Violation
from tests.simulation.checker_sets import SET_STEPS
from tests.simulation.network import Call, Network, Tap, TryState, slot_of_call
from tests.simulation.world import Proc

#: The operations whose answer the checker reads.
STEPS = {"take", "renew", "release", "force_release", "join", "beat", "leave", "resize"}


class DriverErrors:
    """What a driver raises for each fault (``refused``: at connect, so never sent)."""

    def __init__(self, kind: str) -> None:
        if kind == "postgresql":
            import psycopg
            from psycopg import errors as pe

            self.refused: Callable[[], Exception] = lambda: psycopg.OperationalError(
                'connection failed: connection to server at "127.0.0.1", port 5432 failed: '
                "Connection refused"
            )
            self.timeout: Callable[[], Exception] = lambda: psycopg.OperationalError(
                "consuming input failed: server closed the connection unexpectedly"
            )
            self.throttled: Callable[[], Exception] = lambda: pe.SerializationFailure(
                "could not serialize access due to concurrent update"
            )
        else:
            import redis.exceptions as rx

            self.refused = lambda: rx.ConnectionError(
                "Error 111 connecting to 127.0.0.1:6379. Connection refused."
            )
            self.timeout = lambda: rx.TimeoutError("Timeout reading from socket")
            self.throttled = lambda: rx.ResponseError(
                "BUSY Redis is busy running a script. You can only call SCRIPT KILL or "
                "SHUTDOWN NOSAVE."
            )


class RealConns:
    """Real connections to the server, shared by a simulation's links: only one simulated
    thread runs at a time, so a connection is always idle between two uses."""

    def __init__(self, link: Any, timeout: float = 5.0) -> None:
        self.link = link
        self.timeout = timeout
        self.idle: list[Any] = []

    def use(self, run: Callable[[Any], Any]) -> Any:
        conn = self.idle.pop() if self.idle else self.link.connect(self.timeout)
        try:
            result = run(conn)
        except BaseException:
            self.link.close(conn)
            raise
        self.idle.append(conn)
        return result

    def close(self) -> None:
        while self.idle:
            self.link.close(self.idle.pop())


class FaultyLink(TryState):
    """A process's link: the real one's translation and steps, through the simulated network."""

    def __init__(self, real: Any, conns: RealConns, network: Network, tap: Tap, kind: str):
        self.real = real
        self.conns = conns
        self.network = network
        self.world = network.world
        self.tap = tap
        self.errors = DriverErrors(kind)
        #: The try under way, per thread (set when it took its connection:
        #: ``SimTime.acquire``).
        super().__init__()

    def begin(self, fault: str, deadline: float) -> None:
        self.fault, self.deadline = fault, deadline
        timeout = max(0.0, deadline - TRY_GRACE - self.tap.proc.clock.monotonic())
        #: When the try's own timeout runs out (true time): a try unanswered fails then.
        self.until = self.world.now + timeout

    def where(self) -> str:
        return str(self.real.where())

    def translate(self, exc: BaseException, *, operation: str, sent: bool) -> Any:
        return self.real.translate(exc, operation=operation, sent=sent)

    def connect(self, timeout: float) -> FaultyConn:
        refused = self.fault == "refused"
        self.network.travel()
        if refused:
            self.fault = "ok"
            raise self.errors.refused()
        return FaultyConn(self)

    def interrupt(self, conn: Any) -> None:
        """Never called: no watchdog runs in virtual time."""

    def close(self, conn: Any) -> None:
        """A virtual connection holds nothing."""

    def step(self, conn: Any, request: Any, timeout: float) -> Any:
        call = self.tap.current()
        program = self.tap.store.program

        def decode(reply: Any) -> Any:
            if call.operation in SET_STEPS:  # one answer per name, as the step program reads it
                names = [name for name, _ in call.args[0]]
                found = program.answer_all(reply, names)
                return tuple(answers.outcome(a, n, None, 0, False) for a, n in zip(found, names))
            if call.operation not in STEPS:
                return reply
            lock_id = call.args[0] if call.args else ""
            answer = program.answer(reply, lock_id)
            outcome = answers.outcome(answer, lock_id, slot_of_call(call), 0, False)
            return outcome.applied if call.operation == "resize" else outcome

        return self.send(call, lambda real: self.real.step(real, request, timeout), decode)

    def send(self, call: Call, run: Callable[[Any], Any], decode: Callable[[Any], Any]) -> Any:
        """One try on the wire, meeting its fault (the first request of a try; any later one
        of the same try, as a scan's, meets none)."""
        fault, self.fault = self.fault, "ok"
        store = self.tap.store
        tries = getattr(store._local, "try_number", 1)
        self.tap.sending(call.operation, tries, self.deadline)
        self.tap.note(call, tries, fault)
        world, network = self.world, self.network
        if fault == "throttled":
            network.travel()
            raise self.errors.throttled()
        if fault == "late":
            land = self._later(call, run, decode)
            world.at(network.late(), lambda: self.tap.land_late(call, land))
        elif fault != "lost":
            network.travel()
            result = self._apply(call, run, decode)
            if fault != "answer_lost":
                network.travel()
                return result
        world.block(wake_at=max(self.until, world.now))
        raise self.errors.timeout()

    def _apply(self, call: Call, run: Callable[[Any], Any], decode: Callable[[Any], Any]) -> Any:
        return self.conns.use(lambda real: self.tap.apply(call, lambda: run(real), decode))

    def _later(
        self, call: Call, run: Callable[[Any], Any], decode: Callable[[Any], Any]
    ) -> Callable[[], None]:
        def land() -> None:
            try:
                self._apply(call, run, decode)
            except Violation:
                raise
            except Exception:  # its answer goes nowhere
                pass

        return land


class FaultyConn:
    """A virtual connection: PostgreSQL's ``execute`` and Redis's ``client`` commands (the
    calls that are not steps: scans, audit records) go through the link's faults; anything
    else read of it (Redis's ``layout``) is a real connection's."""

    def __init__(self, link: FaultyLink) -> None:
        self._link = link

    def execute(self, *args: Any, **kw: Any) -> Any:
        return self._command(lambda real: real.execute(*args, **kw))

    @property
    def client(self) -> Any:
        return _Commands(self)

    def _command(self, run: Callable[[Any], Any]) -> Any:
        link = self._link
        return link.send(link.tap.current(), run, lambda result: result)

    def __getattr__(self, name: str) -> Any:
        return self._link.conns.use(lambda real: getattr(real, name))


class _Commands:
    """redis-py's client on a virtual connection: each command through the link's faults."""

    def __init__(self, conn: FaultyConn) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        def command(*args: Any, **kw: Any) -> Any:
            return self._conn._command(lambda real: getattr(real.client, name)(*args, **kw))

        return command


class _Unwatched:
    fired = False

    def __enter__(self) -> _Unwatched:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class SimTime:
    """A process's store's ``try_time`` (``stores.remote.connected.TryTime``) in virtual time."""

    def __init__(self, store: Any, link: FaultyLink, proc: Proc, network: Network) -> None:
        self.store = store
        self.link = link
        self.proc = proc
        self.network = network

    def monotonic(self) -> float:
        return float(self.proc.clock.monotonic())

    def acquire(self, lock: threading.Lock, timeout: float) -> bool:
        """Take the connection; a try begins: it may be stalled on its way, and its fault is
        drawn (``refused``: the connection found gone, and connecting again refused)."""
        world, clock = self.network.world, self.proc.clock
        deadline = clock.monotonic() + timeout
        local = self.store._local
        tries = getattr(local, "try_number", 1)
        self.link.tap.starting(self.link.tap.current().operation, tries, local.call_end)
        self.network.stall(self.proc, "a try")
        while not lock.acquire(blocking=False):
            left = deadline - clock.monotonic()
            if left <= 0:
                return False
            # Never "now" again: a deadline a rounding error away must still come (found with
            # aio processes, whose steps wait for one connection in several threads at once).
            wake = max(world.now + left, math.nextafter(world.now, math.inf))
            world.block(until=lambda: not lock.locked(), wake_at=wake)
        fault = self.network.draw()
        if fault == "refused":
            self.store._drop()
        self.link.begin(fault, deadline)
        return True

    def watched(self, deadline: float, interrupt: Callable[[], None]) -> _Unwatched:
        return _Unwatched()

    def start(self, work: Callable[[], None]) -> None:
        self.network.world.spawn(self.proc, work, (), "connect")

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return bool(self.proc.clock.wait(event, timeout))
