"""Small test helpers shared by unit tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any, Callable

from awsflock.clock import FakeClock

#: Starts the reason of a skip that leaves a step program unexecuted (tests/test_step_programs.py):
#: tests/conftest.py lists those at the end of every run.
STEP_PROGRAM_NOT_RUN = "step program not executed"


class ScheduledClock(FakeClock):
    """A fake clock that runs scheduled actions when a sleep carries it past their time."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        super().__init__(start)
        self._events: list[tuple[float, Callable[[], None]]] = []

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run ``action`` once wall time reaches ``when`` (absolute epoch seconds)."""
        self._events.append((when, action))
        self._events.sort(key=lambda e: e[0])

    def sleep(self, seconds: float) -> None:
        target = self.time() + max(0.0, seconds)
        self.sleeps.append(seconds)
        while self._events and self._events[0][0] <= target:
            when, action = self._events.pop(0)
            self.advance(max(0.0, when - self.time()))
            action()
        self.advance(max(0.0, target - self.time()))


class DrivenClock(FakeClock):
    """A fake clock for several tasks at once: an awaited pause waits for the test to move
    the clock (``drive``), as every other task's does, instead of moving it itself (which
    would let one task's pauses race the others' time forward). Each step of ``drive`` lets
    every ready task run once."""

    async def sleep_async(self, seconds: float) -> None:
        import asyncio

        until = self.monotonic() + max(0.0, seconds)
        while self.monotonic() < until:
            await asyncio.sleep(0)

    async def wait_async(self, event: Any, seconds: float) -> bool:
        import asyncio

        until = self.monotonic() + max(0.0, seconds)
        while not event.is_set() and self.monotonic() < until:
            await asyncio.sleep(0)
        return bool(event.is_set())

    async def drive(self, done: Callable[[], bool], step: float = 0.05, limit: float = 600) -> None:
        """Move the clock on by ``step``, letting the tasks run between steps, until
        ``done()`` (an AssertionError after ``limit`` seconds of it)."""
        import asyncio

        end = self.monotonic() + limit
        while not done():
            assert self.monotonic() < end, "not reached"
            self.advance(step)
            for _ in range(3):
                await asyncio.sleep(0)


class ParkingClock(FakeClock):
    """A fake clock that knows which threads are parked on it: waiting (``wait``) for an event
    not set yet, until a time not reached yet. A test moves time on only once every thread it
    drives is parked (``parked``), so that no thread lags behind a clock that raced ahead."""

    def __init__(self) -> None:
        super().__init__()
        self._waiting: list[tuple[Any, float]] = []

    def wait(self, event: Any, seconds: float) -> bool:
        with self._lock:
            entry = (event, self._mono + max(0.0, seconds))
            self._waiting.append(entry)
        try:
            return super().wait(event, seconds)
        finally:
            with self._lock:
                self._waiting.remove(entry)

    def parked(self) -> int:
        """The threads waiting on the clock that nothing has woken yet."""
        with self._lock:
            return sum(not event.is_set() and self._mono < until for event, until in self._waiting)


class CountingClient:
    """Wraps a DynamoDB client and counts calls per operation."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_") or name in ("exceptions", "meta"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return call


class LosingClient(CountingClient):
    """Lets chosen requests through to the server, then loses their answer (raises)."""

    def __init__(
        self, client: Any, lose: Callable[[str, int], bool], *, errors_too: bool = False
    ) -> None:
        super().__init__(client)
        self.lose = lose
        self.errors_too = errors_too  # lose error answers (a failed condition) as well

    def __getattr__(self, name: str) -> Any:
        inner = super().__getattr__(name)
        if not callable(inner) or name in ("exceptions", "meta"):
            return inner

        def call(*args: Any, **kwargs: Any) -> Any:
            from botocore.exceptions import ClientError, ReadTimeoutError

            try:
                result = inner(*args, **kwargs)
            except ClientError:
                if self.errors_too and self.lose(name, self.calls[name]):
                    raise ReadTimeoutError(endpoint_url="http://lost") from None
                raise
            if self.lose(name, self.calls[name]):
                raise ReadTimeoutError(endpoint_url="http://lost")
            return result

        return call


#: The requests that write a lock: UpdateItem, and the transaction of a plain lock's take.
WRITES = ("update_item", "transact_write_items")


class FlakyClient(CountingClient):
    """Fails the first ``failures`` writes (``WRITES``) as if the endpoint were unreachable."""

    def __init__(self, client: Any, failures: int) -> None:
        super().__init__(client)
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        inner = super().__getattr__(name)
        if name not in WRITES:
            return inner

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.failures > 0:
                self.failures -= 1
                from botocore.exceptions import EndpointConnectionError

                raise EndpointConnectionError(endpoint_url="http://down")
            return inner(*args, **kwargs)

        return call


class ScriptedWrites(CountingClient):
    """Writes (``WRITES``) go through ``script(n, send, kwargs)``, which decides what the nth
    does: ``send()`` makes the request."""

    def __init__(self, client: Any, script: Any) -> None:
        super().__init__(client)
        self.script = script
        self.n = 0

    def __getattr__(self, name: str) -> Any:
        inner = super().__getattr__(name)
        if name not in WRITES:
            return inner

        def call(*args: Any, **kwargs: Any) -> Any:
            self.n += 1
            return self.script(self.n, lambda: inner(*args, **kwargs), kwargs)

        return call


def peak_rss_kb(argv: list[str], env: dict[str, str], timeout: float = 900) -> int:
    """Peak resident memory (KB) of running ``argv`` to completion, measured by a parent that
    has no other children (getrusage of children is a high-water mark)."""
    code = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,"
        " check=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@contextlib.contextmanager
def every_connection_held(store: Any) -> Iterator[None]:
    """Hold every connection slot of a network store (``stores.remote.connected``), as
    other threads' tries would: a try of this one's must wait."""
    with contextlib.ExitStack() as stack:
        for slot in store._slots:
            assert slot.lock.acquire(timeout=5)
            stack.callback(slot.lock.release)
        yield
