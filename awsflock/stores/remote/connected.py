"""One try on the wire: the store's one cached connection, used by one try at a time, in the
caller's own thread; bounded by a deadline (``deadline``); behind the gate.

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


class Connected(RetryingStore, Generic[C]):
    """A store that reaches its server through a ``Link``: where it is, its one connection,
    its tries. A subclass sets ``link`` and calls ``_connected_init``."""

    link: Link[C]
    #: The time tries are bounded in (a simulation gives its virtual time).
    try_time: TryTime = REAL_TIME

    def _connected_init(self) -> None:
        self._conn: C | None = None
        #: Held by the try using the connection (one at a time, whatever the threads).
        self._conn_lock = threading.Lock()
        #: ``close`` was called while a try used the connection: that try closes it.
        self._close_after = False
        self._local = threading.local()
        #: The process the connection belongs to (a forked child makes its own).
        self._pid = os.getpid()

    def where(self) -> str:
        return self.link.where()

    def actor(self) -> str | None:
        """None: a database or Redis user names an application more often than a person, so
        the audit names the person as on a DynamoDB endpoint without IAM: user@host
        (``awsflock.lock.admin.default_actor``)."""
        return None

    def close(self) -> None:
        """Close the connection (a later call makes a new one), without waiting: a try using
        it now closes it when it ends."""
        self._forked()
        self._close_after = True
        self._close_if_asked()

    def _close_if_asked(self) -> None:
        """Close the connection if ``close`` asked and no try uses it. A try looks again once it
        has given the connection back, so a ``close`` that met it in use is never missed."""
        if self._close_after and self._conn_lock.acquire(blocking=False):
            try:
                if self._close_after:
                    self._close_after = False
                    self._drop()
            finally:
                self._conn_lock.release()

    def _forked(self) -> None:
        """In a child forked since the connection was made: forget the parent's connection
        (closing it would end the parent's session; the driver leaves it to the parent) and
        its lock (a thread of the parent may have held it as it forked)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._conn = None
            self._conn_lock = threading.Lock()
            self._close_after = False

    def _drop(self) -> None:
        """Close the connection (the caller holds ``_conn_lock``)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self.link.close(conn)

    def _try_may_have_applied(self, err: errors.StoreError) -> bool:
        return err.maybe_applied

    def _attempt(self, operation: str, call: Callable[[C], _T], timeout: float) -> _T:
        # The gate closes when the try's time (the caller's budget for it) is over; one still
        # on the wire is interrupted a grace later, so an answer on its way can still come.
        clock = self.try_time
        send_by = clock.monotonic() + timeout
        self._forked()
        if not clock.acquire(self._conn_lock, max(0.0, send_by - clock.monotonic())):
            raise errors.EndpointUnreachable(
                f"{self.where()} did not answer in time (another try held the connection)",
                hint="check that the server is up and reachable, and retry",
            )
        try:
            return self._on_wire(operation, call, timeout, send_by)
        finally:
            self._conn_lock.release()
            self._close_if_asked()

    def _on_wire(
        self, operation: str, call: Callable[[C], _T], timeout: float, send_by: float
    ) -> _T:
        """The try, holding the connection: made if need be, then the gate, then sent."""
        sent = False
        clock = self.try_time
        end = send_by + TRY_GRACE
        watch = clock.watched(end, lambda: None)
        try:
            conn = self._conn
            if conn is None:
                conn = self._conn = self._connect(timeout, send_by)
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
                self._drop()
            raise
        except Exception as exc:
            if watch.fired:
                self._drop()
                late = errors.EndpointUnreachable(
                    f"{self.where()} did not answer in time",
                    hint="check that the server is up and reachable, and retry",
                )
                late.maybe_applied = True
                raise late from exc
            mapped = self.link.translate(exc, operation=operation, sent=sent)
            if mapped.broken:
                self._drop()
            raise mapped.error from exc
        except BaseException:
            self._drop()  # interrupted by a signal or a kill: the connection is mid-reply
            raise
        if watch.fired:  # answered as it was interrupted: the answer stands, the socket not
            self._drop()
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
        """The cached connection, if any (for tests and set-up that read its facts)."""
        return self._conn
