"""What the network stores share: a budget per call, and retries of transient failures.

A store's call is ``_send(operation, call)``: tries, each bounded by what is left of the
caller's budget (``budget``; default: one request timeout), with jittered exponential backoff
between them. Only ``Throttled`` and ``EndpointUnreachable`` are retried. A try that failed
after it may have reached the store makes the call *in doubt* (``_in_doubt``): it may still be
applied, even after a later try was answered; a final failure carries it as ``maybe_applied``.
A step made of several calls (``step``) keeps the doubt of every call in it: a later call that
fails without doubt, or is answered, does not make an earlier one's late landing forgotten.
"""

from __future__ import annotations

import contextlib
import random
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Callable, TypeVar

from awsflock import errors, metrics
from awsflock.clock import Clock
from awsflock.protocol import MIN_TRY, Sleeper, Waker

BACKOFF_BASE = 0.05
BACKOFF_CAP = 1.0
_RNG = random.Random()
_T = TypeVar("_T")


def backoff(tries: int, rng: random.Random) -> float:
    """The pause after the ``tries``-th failed try: jittered, exponential, capped."""
    return float(min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (tries - 1)) * rng.uniform(0.5, 1))


def retry_fits(when: float, end: float) -> bool:
    """Whether a retry sent at monotonic time ``when`` still has ``MIN_TRY`` of a budget that
    runs out at ``end``. Checked before the backoff and again after it, when the retry is about
    to go."""
    return when + MIN_TRY <= end


def still_fits(when: float, end: float) -> bool:
    """Whether the retry whose backoff ended at ``when`` still goes: the process may have been
    paused in its backoff for any time."""
    return retry_fits(when, end)


class RetryingStore(ABC):
    """A base for stores whose calls go over a network. A subclass gives ``_attempt`` (one
    try, its errors translated) and ``_try_may_have_applied`` (whether a failed try may have
    reached the store)."""

    clock: Clock
    request_timeout: float
    _local: threading.local
    #: Real time a try is given beyond its timeout before it counts as unanswered (the request
    #: layer's): kept inside the call's budget, so a call is over by its end.
    try_grace: float = 0.0
    #: Where backoff pauses draw their jitter (a simulation gives its seeded source).
    _retry_rng: random.Random = _RNG

    @contextlib.contextmanager
    def budget(self, end: float) -> Iterator[None]:
        """Calls made inside end (with their retries) by ``end`` on the store clock's monotonic
        time (an outer, earlier end wins)."""
        outer = getattr(self._local, "end", None)
        self._local.end = end if outer is None else min(outer, end)
        try:
            yield
        finally:
            self._local.end = outer

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """One lock step, however many calls it makes: if any call of it may have reached the
        store unanswered (or one was applied and a later one failed: ``applied``), every later
        answer says ``in_doubt`` and a final failure ``maybe_applied``."""
        outer = getattr(self._local, "step_doubt", None)
        self._local.step_doubt = bool(outer)
        try:
            yield
        except errors.StoreError as err:
            if self._local.step_doubt:
                err.maybe_applied = True
            raise
        finally:
            self._local.step_doubt = outer if outer is None else outer or self._local.step_doubt

    def applied(self) -> None:
        """A call of the current step was applied: a later failure of the step may not say
        that nothing was."""
        if getattr(self._local, "step_doubt", None) is not None:
            self._local.step_doubt = True

    def waker(self, lock_id: str) -> Waker:
        """A waiter sleeps between polls (a store that can wake it early says how)."""
        return Sleeper()

    @abstractmethod
    def _attempt(self, operation: str, call: Callable[..., _T], timeout: float) -> _T:
        """One try of ``call`` within ``timeout``, its failures raised as awsflock's."""

    @abstractmethod
    def _try_may_have_applied(self, err: errors.StoreError) -> bool:
        """Whether the try that failed with ``err`` may have reached the store."""

    def _send(self, operation: str, call: Callable[..., _T]) -> _T:
        """Make one call, retrying throttling and transient failures with jittered backoff
        while the budget lasts. A final failure is raised translated, with ``maybe_applied``
        set if any try may have reached the store.

        A retry is sent only if at least ``MIN_TRY`` of the budget is left when it is about to
        go: a process paused in its backoff (SIGSTOP, a frozen VM) wakes to a failure, not to
        a request made of readings taken before the pause."""
        start = self.clock.monotonic()
        try:
            answer = self._tries(operation, call, start)
        except errors.AwsflockError as err:
            self._measured(operation, start, type(err).__name__)
            raise
        self._measured(operation, start, "ok")
        return answer

    def _measured(self, operation: str, start: float, outcome: str) -> None:
        took = self.clock.monotonic() - start
        metrics.record(
            "awsflock.store.request.duration", took, None, self, step=operation, outcome=outcome
        )
        retries = getattr(self._local, "try_number", 1) - 1
        if retries:
            metrics.record("awsflock.store.retries", retries, None, self, step=operation)

    def _tries(self, operation: str, call: Callable[..., _T], start: float) -> _T:
        end = getattr(self._local, "end", None)
        if end is None:
            end = start + self.request_timeout
        end -= self.try_grace  # a try's grace ends by the budget's end
        tries = 0
        self._local.earlier_try_may_have_applied = False
        self._local.call_end = end
        while True:
            tries += 1
            self._local.try_number = tries
            timeout = max(MIN_TRY, min(self.request_timeout, end - self.clock.monotonic()))
            try:
                return self._attempt(operation, call, timeout)
            except (errors.Throttled, errors.EndpointUnreachable) as err:
                # Even if a later try is answered, this one may still be applied (late).
                if self._try_may_have_applied(err):
                    self._local.earlier_try_may_have_applied = True
                    self.applied()  # the step is in doubt too
                pause = backoff(tries, self._retry_rng)
                if retry_fits(self.clock.monotonic() + pause, end):
                    self.clock.sleep(pause)
                    if still_fits(self.clock.monotonic(), end):
                        continue
                err.maybe_applied = self._in_doubt()
                took = self.clock.monotonic() - start
                err.message += f" ({tries} {'try' if tries == 1 else 'tries'} in {took:.1f}s)"
                raise
            except errors.AwsflockError as err:
                # Refused outright (a retry met a check the first try did not): an earlier try
                # of the call may still have been applied.
                err.maybe_applied = err.maybe_applied or self._in_doubt()
                raise

    def _in_doubt(self) -> bool:
        """Whether the last call made by this thread, or any earlier call of its step, had a
        failed try that may have reached the store (it may land even after a later try was
        answered)."""
        return bool(
            getattr(self._local, "earlier_try_may_have_applied", False)
            or getattr(self._local, "step_doubt", None)
        )
