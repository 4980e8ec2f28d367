"""Tries for a link that cannot be interrupted (botocore's HTTP: its timeouts bound each socket
operation, not an answer that trickles in, nor a connect that hangs): each try runs in a
long-lived request thread, and the caller waits for it no longer than its timeout (plus a
grace). A thread whose try was given up is left to finish it and then ends; the next try takes
another. Threads are kept idle between tries, so a try starts none in the usual case.

The gate holds here too: a try given up before its thread took it up is never sent, nor is one
given up before its request left, for a link that says when it is about to send (``at_send``,
called in the request thread: botocore's ``before-send``). A try given up there was certainly not
applied (``TryGivenUp`` without ``maybe_applied``): it is retried, and no doubt is reported.
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
#: The try a request thread is running (for ``at_send``).
_serving = threading.local()


class TryGivenUp(errors.EndpointUnreachable):
    """A try its caller stopped waiting for; ``maybe_applied`` if its request may have left."""

    def __init__(self, message: str, *, hint: str, sent: bool) -> None:
        super().__init__(message, hint=hint)
        self.maybe_applied = sent


class _Job(Generic[_T]):
    def __init__(self, call: Callable[[], _T], announced: bool) -> None:
        self.call = call
        #: Whether the call says when its request is about to leave (``at_send``).
        self.announced = announced
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
                self.sent = not self.announced
            _serving.job = self
            self.value = self.call()
        except BaseException as exc:  # handed to the caller's thread as is
            self.error = exc
        finally:
            _serving.job = None
            self.done.set()

    def sending(self) -> None:
        """The gate at the moment of sending: refused once the caller has given the try up."""
        with self.gate:
            if self.abandoned:
                raise TryGivenUp("the try was given up before it was sent", hint="", sent=False)
            self.sent = True


def at_send() -> None:
    """Called by a link just before a request leaves, in the thread that sends it: raises
    ``TryGivenUp`` (and nothing is sent) if the caller has given the try up. Outside a request
    thread, nothing."""
    job: _Job[Any] | None = getattr(_serving, "job", None)
    if job is not None:
        job.sending()


class Workers:
    """The request threads of one store (as many as tries run at once)."""

    def __init__(self) -> None:
        self._idle: list[queue.SimpleQueue[_Job[Any] | None]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def run(self, call: Callable[[], _T], timeout: float, where: str, announced: bool) -> _T:
        """``call()`` in a request thread, within ``timeout`` (plus a grace) of real time;
        ``announced``: the call passes ``at_send`` before its request leaves."""
        job: _Job[_T] = _Job(call, announced)
        inbox = self._take()
        inbox.put(job)
        try:
            answered = job.done.wait(timeout + TRY_GRACE)
        except BaseException:  # Ctrl-C, a signal's exception: given up all the same
            _give_up(job, inbox)
            raise
        if not answered:
            if not _give_up(job, inbox):
                raise TryGivenUp(
                    f"{where}: the try was given up before it was sent (it took over "
                    f"{timeout + TRY_GRACE:.1f}s to prepare)",
                    hint="retry; if it recurs, check what slows this process (credentials, CPU)",
                    sent=False,
                )
            raise TryGivenUp(
                f"{where} did not answer in time", hint="check the network and retry", sent=True
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


def _give_up(job: _Job[Any], inbox: queue.SimpleQueue[_Job[Any] | None]) -> bool:
    """A try its caller no longer waits for: never sent if its thread has not sent it yet.
    Whether it may have been."""
    with job.gate:  # from here on, a thread that has not sent it never will
        job.abandoned = True
        sent = job.sent
    inbox.put(None)  # that thread ends once its try does
    return sent


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
