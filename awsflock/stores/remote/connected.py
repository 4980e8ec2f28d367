"""One try on the wire: one of the store's cached connections, each used by one try at a time,
in the caller's own thread; bounded by a deadline (``deadline``); behind the gate.

A store keeps up to ``CONNECTIONS`` connections, made as tries from several threads at once
need them (the table's renewer runs up to 8 workers; a service's threads share one table): a
try takes a free one, and waits only when every one is in use. A process that sends from one
thread at a time (the command line) makes one.

The gate: a try is sent only if its time (the caller's budget for it) is not over when it is
about to go, after it waited for the connection (another thread's try may hold it) and made it
if there was none. A try refused at the gate was never sent (certainly not applied); one past
the gate may have been (``maybe_applied`` when it fails). A try still on the wire at its
deadline (its time plus ``TRY_GRACE``) is interrupted (its socket shut down) and fails as
unanswered; its connection is never used again.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Generic, TypeVar

from awsflock import errors
from awsflock.stores.remote.deadline import watched
from awsflock.stores.remote.link import C, Link
from awsflock.stores.remote.requests import RetryingStore
from awsflock.stores.remote.worker import request_thread

_T = TypeVar("_T")
#: Real time a try is given beyond its timeout before it is interrupted.
TRY_GRACE = 0.5
#: The connections a store keeps at most (as many as the renewer's workers).
CONNECTIONS = 8


class _Slot:
    """A place for one connection, and the lock a try holds while it uses it."""

    __slots__ = ("close_after", "conn", "lock")

    def __init__(self) -> None:
        self.conn: Any = None
        self.lock = threading.Lock()
        #: ``close`` was called while a try used the connection: that try closes it.
        self.close_after = False


def gate_open(deadline: float, now: float) -> bool:
    """Whether a try that may be sent until ``deadline`` (real time) may still be sent at
    ``now``."""
    return now < deadline


class TryTime:
    """The time a try is bounded in: real time. Every wait of a try goes through here, so that
    a simulation in virtual time (``tests/simulation/links.py``) can give its own: its clock
    for deadlines, its scheduler for the waits, and no watchdog (no virtual try outlives its
    deadline). Production uses this one, unchanged."""

    def monotonic(self) -> float:
        return time.monotonic()

    def acquire(self, lock: threading.Lock, timeout: float) -> bool:
        """Take ``lock`` (the connection) within ``timeout``."""
        return lock.acquire(timeout=timeout)

    def watched(self, deadline: float, interrupt: Callable[[], None]) -> watched:
        return watched(deadline, interrupt)

    def start(self, work: Callable[[], None]) -> None:
        """Run ``work`` (a connect) beside the caller."""
        request_thread(work)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(timeout)


REAL_TIME = TryTime()
#: The watch of a try not sent yet: never entered, so it never fires.
_NOT_SENT = watched(0.0, lambda: None)


class Connected(RetryingStore, Generic[C]):
    """A store that reaches its server through a ``Link``: where it is, its connections
    (``CONNECTIONS`` slots), its tries. A subclass sets ``link`` and calls
    ``_connected_init``."""

    link: Link[C]
    #: The time tries are bounded in (a simulation gives its virtual time).
    try_time: TryTime = REAL_TIME

    def _connected_init(self) -> None:
        self._slots = [_Slot() for _ in range(CONNECTIONS)]
        #: Where a try waits when every connection is in use (turn by turn).
        self._turn = 0
        self._local = threading.local()
        #: The process the connections belong to (a forked child makes its own).
        self._pid = os.getpid()

    def where(self) -> str:
        return self.link.where()

    def actor(self) -> str | None:
        """None: a database or Redis user names an application more often than a person, so
        the audit names the person as on a DynamoDB endpoint without IAM: user@host
        (``awsflock.lock.admin.default_actor``)."""
        return None

    def close(self) -> None:
        """Close the connections (a later call makes new ones), without waiting: a try using
        one now closes it when it ends."""
        self._forked()
        for slot in self._slots:
            slot.close_after = True
            self._close_if_asked(slot)

    def _close_if_asked(self, slot: _Slot) -> None:
        """Close ``slot``'s connection if ``close`` asked and no try uses it. A try looks again
        once it has given the connection back, so a ``close`` that met it in use is never
        missed."""
        if slot.close_after and slot.lock.acquire(blocking=False):
            try:
                if slot.close_after:
                    slot.close_after = False
                    self._drop(slot)
            finally:
                slot.lock.release()

    def _forked(self) -> None:
        """In a child forked since the connections were made: forget the parent's connections
        (closing them would end the parent's sessions; the driver leaves them to the parent)
        and their locks (a thread of the parent may have held one as it forked)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._slots = [_Slot() for _ in range(CONNECTIONS)]

    def _drop(self, slot: _Slot | None = None) -> None:
        """Close ``slot``'s connection (default: the current try's; the caller holds its
        lock)."""
        if slot is None:
            slot = self._local.slot
        conn, slot.conn = slot.conn, None
        if conn is not None:
            self.link.close(conn)

    def _pick(self) -> _Slot:
        """The slot a try takes: a free one with a connection, else a free one without, else
        the next in turn (to wait for)."""
        slots = self._slots
        free = [slot for slot in slots if not slot.lock.locked()]
        for slot in free:
            if slot.conn is not None:
                return slot
        if free:
            return free[0]
        self._turn = (self._turn + 1) % len(slots)
        return slots[self._turn]

    def _try_may_have_applied(self, err: errors.StoreError) -> bool:
        return err.maybe_applied

    def _attempt(self, operation: str, call: Callable[[C], _T], timeout: float) -> _T:
        # The gate closes when the try's time (the caller's budget for it) is over; one still
        # on the wire is interrupted a grace later, so an answer on its way can still come.
        clock = self.try_time
        send_by = clock.monotonic() + timeout
        self._forked()
        slot = self._local.slot = self._pick()
        if not clock.acquire(slot.lock, max(0.0, send_by - clock.monotonic())):
            raise errors.EndpointUnreachable(
                f"{self.where()} did not answer in time (other tries held every connection)",
                hint="check that the server is up and reachable, and retry",
            )
        try:
            return self._on_wire(operation, call, timeout, send_by, slot)
        finally:
            slot.lock.release()
            self._close_if_asked(slot)

    def _on_wire(
        self, operation: str, call: Callable[[C], _T], timeout: float, send_by: float, slot: _Slot
    ) -> _T:
        """The try, holding the connection: made if need be, then the gate, then sent."""
        sent = False
        clock = self.try_time
        end = send_by + TRY_GRACE
        watch = _NOT_SENT
        try:
            conn = slot.conn
            if conn is None:
                conn = slot.conn = self._connect(timeout, send_by)
            if not gate_open(send_by, clock.monotonic()):
                raise errors.EndpointUnreachable(
                    f"{self.where()}: the try was given up before it was sent", hint="retry"
                )
            sent = True
            self._local.try_timeout = timeout  # for a link's own waits (Redis's WAIT)
            self._local.send_by = send_by  # for a link that sends again (``may_send``)
            watch = clock.watched(end, lambda: self.link.interrupt(conn))
            with watch:
                value = call(conn)
        except errors.AwsflockError as err:
            if err.maybe_applied or watch.fired:
                self._drop(slot)
            raise
        except Exception as exc:
            if watch.fired:
                self._drop(slot)
                late = errors.EndpointUnreachable(
                    f"{self.where()} did not answer in time",
                    hint="check that the server is up and reachable, and retry",
                )
                late.maybe_applied = True
                raise late from exc
            mapped = self.link.translate(exc, operation=operation, sent=sent)
            if mapped.broken:
                self._drop(slot)
            raise mapped.error from exc
        except BaseException:
            self._drop(slot)  # interrupted by a signal or a kill: the connection is mid-reply
            raise
        if watch.fired:  # answered as it was interrupted: the answer stands, the socket not
            self._drop(slot)
        return value

    def _try_timeout(self) -> float:
        """The current try's time, for a link's own waits (Redis's WAIT)."""
        timeout: float = self._local.try_timeout
        return timeout

    def may_send(self) -> bool:
        """Whether the current try's gate is still open: a link that sends again within one
        try (Redis's step, after the server lost its script) asks first."""
        send_by = getattr(self._local, "send_by", None)
        return send_by is None or gate_open(send_by, self.try_time.monotonic())

    def _connect(self, timeout: float, end: float) -> C:
        """A new connection, made in a request thread and waited for until ``end``: a connect
        that hangs (a server that accepts and never answers) cannot hold the caller past its
        budget. One that ends after the caller gave up is closed unused."""
        box: dict[str, Any] = {}
        done = threading.Event()
        lock = threading.Lock()

        def work() -> None:
            try:
                conn = self.link.connect(timeout)
            except BaseException as exc:  # handed to the caller's thread as is
                box["error"] = exc
                done.set()
                return
            with lock:
                if box.get("abandoned"):
                    self.link.close(conn)
                    return
                box["conn"] = conn
            done.set()

        clock = self.try_time
        clock.start(work)
        try:
            finished = clock.wait(done, max(0.0, end - clock.monotonic()))
        except BaseException:  # interrupted (Ctrl-C, a signal's exception): nobody will use it
            with lock:
                box["abandoned"] = True
                late = box.get("conn")
            if late is not None:
                self.link.close(late)
            raise
        if not finished:
            with lock:
                box["abandoned"] = True
                if "conn" in box:  # made just now
                    made: C = box["conn"]
                    return made
            raise errors.EndpointUnreachable(
                f"{self.where()} did not answer in time (connecting)",
                hint="check that the server is up and reachable, and retry",
            )
        if "error" in box:
            raise box["error"]
        conn: C = box["conn"]
        return conn

    def _connection_now(self) -> Any:
        """A cached connection, if any (for tests and set-up that read its facts)."""
        return next((slot.conn for slot in self._slots if slot.conn is not None), None)
