"""Virtual time and a seeded scheduler for real library code.

Every simulated process (``Proc``) runs in ordinary threads, but only one thread runs at a time:
the scheduler hands it the baton, and the thread gives it back at its next *yield point*: a
sleep or a wait on its clock, a join, or a request to the store (``network``). The scheduler then
picks the next thread at random (seeded) among those ready at the current virtual time, or moves
time on to the next thing that happens. Nothing else decides the order, so one seed replays one
run exactly, whatever the machine's speed.

A process has its own clock: true time plus an offset that drifts within a bound (the skew
window). A process can be paused (no thread of it runs until a virtual time: a GC pause, a
SIGSTOP) or killed (its threads raise ``Killed`` at their next yield point, and a killed process
sends nothing more; what it already sent still lands).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import threading
from collections import deque
from typing import Any, Callable

#: Virtual time starts here (epoch seconds): far from any real clock, so nothing real leaks in.
EPOCH = 1_900_000_000.0


class Killed(BaseException):
    """Raised in a killed process's threads: it unwinds them without any effect."""


class Stalled(Exception):
    """Nothing can run and nothing is scheduled: a thread waits for something that never comes."""


class SimClock:
    """A process's view of time: true time plus a bounded, drifting offset; its sleeps and
    waits are yield points in virtual time."""

    def __init__(self, world: World, proc: Proc, amplitude: float, period: float, phase: float):
        self.world = world
        self.proc = proc
        self.amplitude = amplitude
        self.period = period
        self.phase = phase

    def offset(self, at: float | None = None) -> float:
        t = self.world.now if at is None else at
        return self.amplitude * math.sin(2 * math.pi * (t - EPOCH) / self.period + self.phase)

    def time(self) -> float:
        return self.world.now + self.offset()

    def monotonic(self) -> float:
        return self.world.now - EPOCH + 1000.0

    def sleep(self, seconds: float) -> None:
        self.world.block(wake_at=self.world.now + max(0.0, seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if not event.is_set():
            self.world.block(wake_at=self.world.now + max(0.0, seconds), event=event)
        return event.is_set()

    async def sleep_async(self, seconds: float) -> None:
        """An awaited pause: a timer of the process's event loop, in virtual time."""
        import asyncio

        await asyncio.sleep(max(0.0, seconds))

    async def wait_async(self, event: threading.Event, seconds: float) -> bool:
        from tests.simulation.aioloop import wait_event

        return await wait_event(event, seconds)

    def start_thread(
        self, target: Callable[..., None], args: tuple[Any, ...], name: str
    ) -> threading.Thread:
        return self.world.spawn(self.proc, target, args, name)


class Proc:
    """A simulated process: a name, a clock, and whether it is paused or killed."""

    def __init__(self, world: World, name: str, clock_error: float) -> None:
        self.world = world
        self.name = name
        rng = world.rng
        self.clock = SimClock(
            world,
            self,
            amplitude=rng.uniform(0, clock_error),
            period=rng.uniform(30, 600),
            phase=rng.uniform(0, 2 * math.pi),
        )
        self._paused_until = 0.0
        #: (start, end) of each pause, in true time (what ``paused_since`` reads).
        self.pauses: list[tuple[float, float]] = []
        self.killed = False
        self.threads: list[SimThread] = []

    @property
    def paused_until(self) -> float:
        return self._paused_until

    @paused_until.setter
    def paused_until(self, until: float) -> None:
        if until > self.world.now and until > self._paused_until:
            self.pauses.append((self.world.now, until))
        self._paused_until = until

    def paused_since(self, when: float) -> bool:
        """Whether the process was paused at some moment from ``when`` (true time) on."""
        return bool(self.pauses) and self.pauses[-1][1] > when  # each ends after the last

    def alive(self) -> bool:
        return not self.killed and any(not t.done for t in self.threads)


class SimThread(threading.Thread):
    """A thread that runs only when the scheduler hands it the baton."""

    def __init__(
        self,
        world: World,
        proc: Proc,
        target: Callable[..., None],
        args: tuple[Any, ...],
        name: str,
    ) -> None:
        super().__init__(name=f"sim:{proc.name}:{name}", daemon=True)
        self.world = world
        self.proc = proc
        self.target = target
        self.target_args = args
        #: Released by the scheduler to let this thread run (a bare lock: see ``World._back``).
        self.go = threading.Lock()
        self.go.acquire()
        self.done = False
        self.started_run = False
        self.wake_at: float | None = None
        self.event: threading.Event | None = None
        self.until: Callable[[], bool] | None = None
        self.error: BaseException | None = None
        #: Inside a store call: a pause does not hold it up.
        self.in_request = False
        #: Runs an event loop (``aioloop``), and is inside its ``select`` (where it may yield).
        self.runs_loop = False
        self.in_select = False

    def ready(self, now: float) -> bool:
        if self.done or (self.proc._paused_until > now and not self.in_request):
            return False
        if self.proc.killed:
            return True  # it runs once more, to unwind
        if not self.started_run:
            return True
        if self.event is not None and self.event.is_set():
            return True
        if self.until is not None and self.until():
            return True
        return self.wake_at is not None and self.wake_at <= now

    def next_time(self) -> float | None:
        """When this thread becomes ready by time alone (None: only by an event)."""
        if self.done:
            return None
        times = [t for t in (self.wake_at,) if t is not None]
        if not times:
            return None
        return min(times) if self.in_request else max(min(times), self.proc._paused_until)

    def run(self) -> None:
        self.go.acquire()
        self.started_run = True
        try:
            if self.proc.killed:
                raise Killed
            self.target(*self.target_args)
        except Killed:
            pass
        except BaseException as exc:
            self.error = exc
        finally:
            self.done = True
            self.world.hand_back()

    def join(self, timeout: float | None = None) -> None:
        if threading.current_thread() is self or self.done:
            return
        current = threading.current_thread()
        if isinstance(current, SimThread):
            wake = None if timeout is None else self.world.now + timeout
            self.world.block(wake_at=wake, until=lambda: self.done)
        else:
            super().join(timeout)


class World:
    """The scheduler, true time and what is due to happen."""

    def __init__(self, seed: int, *, trace: int = 400) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = EPOCH
        self.procs: list[Proc] = []
        self.threads: list[SimThread] = []
        self.steps = 0
        self.trace: deque[str] = deque(maxlen=trace)
        #: Released by the running thread when it yields the baton. The baton passes with bare
        #: locks (held, released by the other side), not Events: a pass is two C calls, not a
        #: Condition's Python code, and a run makes tens of thousands of them.
        self._back = threading.Lock()
        self._back.acquire()
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.current: SimThread | None = None
        #: What a thread that runs an event loop did to block it (a yield point outside its
        #: ``select``): awsflock must never block the loop. The run reports it.
        self.blocked_loops: list[str] = []

    # -- building the world ----------------------------------------------------------------------

    def process(self, name: str, clock_error: float) -> Proc:
        proc = Proc(self, name, clock_error)
        self.procs.append(proc)
        return proc

    def spawn(
        self,
        proc: Proc,
        target: Callable[..., None],
        args: tuple[Any, ...] = (),
        name: str = "main",
    ) -> SimThread:
        thread = SimThread(self, proc, target, args, name)
        proc.threads.append(thread)
        self.threads.append(thread)
        thread.start()
        return thread

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run ``action`` (in the scheduler, as one step) once true time reaches ``when``."""
        heapq.heappush(self._due, (when, next(self._order), action))

    def note(self, text: str) -> None:
        self.trace.append(f"{self.now - EPOCH:10.3f} #{self.steps} {text}")

    # -- inside a simulated thread ---------------------------------------------------------------

    def block(
        self,
        *,
        wake_at: float | None = None,
        event: threading.Event | None = None,
        until: Callable[[], bool] | None = None,
    ) -> None:
        """Give the baton back until woken: at ``wake_at``, when ``event`` is set, or when
        ``until()`` holds. Raises Killed in a killed process."""
        thread = threading.current_thread()
        assert isinstance(thread, SimThread), "a yield point outside the simulation"
        if thread.proc.killed:
            raise Killed
        if thread.runs_loop and not thread.in_select:
            self.blocked_loops.append(f"{thread.name} blocked its event loop")
        thread.wake_at, thread.event, thread.until = wake_at, event, until
        self._back.release()
        thread.go.acquire()
        thread.wake_at = thread.event = thread.until = None
        if thread.proc.killed:
            raise Killed

    def hand_back(self) -> None:
        self._back.release()

    # -- the scheduler ---------------------------------------------------------------------------

    def step(self) -> bool:
        """Run one thing: a due action, or one thread until its next yield point. False when
        nothing is left to do."""
        while True:
            if self._due and self._due[0][0] <= self.now:
                _, _, action = heapq.heappop(self._due)
                self.steps += 1
                action()
                return True
            ready = [t for t in self.threads if t.ready(self.now)]
            if ready:
                thread = ready[self.rng.randrange(len(ready))]
                self.steps += 1
                self._resume(thread)
                return True
            upcoming = [t for t in (t.next_time() for t in self.threads) if t is not None]
            if self._due:
                upcoming.append(self._due[0][0])
            paused = [p.paused_until for p in self.procs if p.paused_until > self.now]
            if not upcoming:
                if any(not t.done for t in self.threads) and not paused:
                    raise Stalled(", ".join(t.name for t in self.threads if not t.done))
                if not paused:
                    return False
            self.now = max(self.now, min(upcoming + paused))

    def _resume(self, thread: SimThread) -> None:
        self.current = thread
        thread.go.release()
        self._back.acquire()
        self.current = None

    def finish(self) -> None:
        """Kill what is still running and let every thread unwind."""
        for proc in self.procs:
            proc.killed = True
            proc.paused_until = 0.0
        for thread in list(self.threads):
            if not thread.done:
                self._resume(thread)
        for thread in list(self.threads):
            thread.join(5)
