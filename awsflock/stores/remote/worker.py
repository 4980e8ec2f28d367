"""Tries for a link that cannot be interrupted (botocore's HTTP: its timeouts bound each socket
operation, not an answer that trickles in, nor a connect that hangs): each try runs in a
long-lived request thread, and the caller waits for it no longer than its timeout (plus a
grace). A thread whose try was given up is left to finish it and then ends; the next try takes
another. Threads are kept idle between tries, so a try starts none in the usual case.

The gate holds here too: a try given up before its thread took it up is never sent.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any, Callable, Generic, TypeVar

from awsflock import errors

_T = TypeVar("_T")
#: Real time a try is given beyond its timeout before it is given up.
TRY_GRACE = 0.25


class _Job(Generic[_T]):
    def __init__(self, call: Callable[[], _T]) -> None:
        self.call = call
        self.gate = threading.Lock()
        self.sent = False
        self.abandoned = False
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.gate:
                if self.abandoned:  # given up before it was taken up: never sent
                    return
                self.sent = True
            self.value = self.call()
        except BaseException as exc:  # handed to the caller's thread as is
            self.error = exc
        finally:
            self.done.set()


class Workers:
    """The request threads of one store (as many as tries run at once)."""

    def __init__(self) -> None:
        self._idle: list[queue.SimpleQueue[_Job[Any] | None]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def run(self, call: Callable[[], _T], timeout: float, where: str) -> _T:
        """``call()`` in a request thread, within ``timeout`` (plus a grace) of real time."""
        job: _Job[_T] = _Job(call)
        inbox = self._take()
        inbox.put(job)
        try:
            answered = job.done.wait(timeout + TRY_GRACE)
        except BaseException:  # Ctrl-C, a signal's exception: given up all the same
            _give_up(job, inbox)
            raise
        if not answered:
            _give_up(job, inbox)
            raise errors.EndpointUnreachable(
                f"{where} did not answer in time", hint="check the network and retry"
            )
        with self._lock:
            self._idle.append(inbox)
        if job.error is not None:
            raise job.error
        value: _T = job.value
        return value

    def _forked(self) -> None:
        """In a forked child: none of the parent's threads, and a lock of its own (a thread
        of the parent may have held this one as it forked: it would never be let go)."""
        if self._pid != os.getpid():
            self._lock = threading.Lock()
            self._idle, self._pid = [], os.getpid()

    def _take(self) -> queue.SimpleQueue[_Job[Any] | None]:
        self._forked()
        with self._lock:
            if self._idle:
                return self._idle.pop()
        inbox: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        request_thread(_serve, inbox)
        return inbox

    def close(self) -> None:
        """End the idle threads."""
        self._forked()
        with self._lock:
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)


def _give_up(job: _Job[Any], inbox: queue.SimpleQueue[_Job[Any] | None]) -> None:
    """A try its caller no longer waits for: never sent if its thread has not taken it up."""
    with job.gate:  # from here on, a thread that has not sent it never will
        job.abandoned = True
    inbox.put(None)  # that thread ends once its try does


def request_thread(target: Callable[..., None], *args: Any) -> threading.Thread:
    """Start a request thread (the only place that starts one: ``tests/test_layout.py``)."""
    thread = threading.Thread(target=target, args=args, name="awsflock-request", daemon=True)
    thread.start()
    return thread


def _serve(inbox: queue.SimpleQueue[_Job[Any] | None]) -> None:
    while True:
        job = inbox.get()
        if job is None:
            return
        job.run()
