"""One renewer for all the holds of a table: ``Renewer`` (threads) and ``AsyncRenewer`` (tasks).

Each hold (``awsflock.lock.heartbeat.Hold``, or the asynchronous one) keeps its own schedule:
``wake_at()`` says when it next needs a step (its next renewal, or its safety deadline), and
``_tick()`` takes that step (loses the lease past its deadline, renews it when due). A renewer
only runs steps when they are due, and never lets one hold's slow step hold up another's:

- ``Renewer``: a scheduler thread wakes at the earliest step due and hands each due hold to a
  worker thread (an idle one, else a new one, up to ``MAX_WORKERS``). A hold whose step is
  still running when its deadline passes is declared lost by the scheduler itself
  (``overdue``). Threads are started through the clock (``clock.start_thread``: a simulation
  runs them in virtual time); idle ones end (all of them when no hold is left, a worker after
  ``IDLE`` seconds without work), and the next hold starts them again. So a process
  holding 1,000 locks runs one scheduler and at most ``MAX_WORKERS`` workers, not 1,000
  threads.
- ``AsyncRenewer``: in each event loop that holds locks, one task does the scheduling, and
  each due step is a task of its own (a table shared by several loops, each in its thread,
  renews each loop's holds in that loop).

A renewer holds its holds weakly: a hold dropped without being stopped stops being renewed,
and its lease runs out.
"""

from __future__ import annotations

import collections
import logging
import threading
import weakref
from typing import Any, Callable

from awsflock.clock import Clock, start_thread

log = logging.getLogger("awsflock.heartbeat")

#: Steps running at once, at most (each a renewal request, bounded by its hold's deadline).
MAX_WORKERS = 8
#: A worker with nothing to do for this long ends.
IDLE = 30.0
#: The scheduler looks again at least this often, as a check on its own arithmetic.
LOOK_EVERY = 5.0


class _Schedule:
    """The holds of one renewer and what each is doing: the part both renewers share."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holds: dict[int, weakref.ref[Any]] = {}
        self.busy: set[int] = set()

    def add(self, hold: Any) -> None:
        with self.lock:
            self.holds[id(hold)] = weakref.ref(hold)

    def remove(self, hold: Any) -> None:
        with self.lock:
            ref = self.holds.get(id(hold))
            if ref is not None and ref() is hold:
                del self.holds[id(hold)]

    def due(
        self, now: float, tell: Callable[[list[Any]], None] | None = None
    ) -> tuple[list[Any], float | None]:
        """The holds whose step is due now (marked busy), and when the next one is due (None:
        no hold left). A busy hold past its deadline is declared lost here; ``tell`` then runs
        what follows the losses (their ``on_lost``), if given, instead of this thread."""
        ready, overdue, soonest = [], [], None
        with self.lock:
            for key, ref in list(self.holds.items()):
                hold = ref()
                if hold is None:
                    del self.holds[key]
                    continue
                if key in self.busy:
                    when = hold.deadline_at()
                    if when is not None and when <= now:
                        overdue.append(hold)
                        continue
                else:
                    when = hold.wake_at()
                    if when is None:
                        del self.holds[key]
                        continue
                    deadline = hold.deadline_at()
                    if deadline is not None and deadline <= now:
                        overdue.append(hold)  # no step needed: declared lost here
                        continue
                    if when <= now:
                        self.busy.add(key)
                        ready.append(hold)
                        when = deadline  # its step may outlast it: looked at again by then
                if when is not None and (soonest is None or when < soonest):
                    soonest = when
            if not self.holds:
                return ready, None
        if tell is None:
            for hold in overdue:
                hold.overdue()
        else:
            declared = [hold for hold in overdue if hold.overdue(tell=False)]
            if declared:
                tell(declared)
        if overdue and soonest is None:
            soonest = now + LOOK_EVERY
        return ready, soonest

    def done(self, hold: Any) -> None:
        with self.lock:
            self.busy.discard(id(hold))


class Renewer:
    """The renewer of a synchronous table: a scheduler thread and up to ``MAX_WORKERS``."""

    def __init__(self, clock: Clock, name: str = "awsflock-renewer") -> None:
        self.clock = clock
        self.name = name
        self.schedule = _Schedule()
        self._wake = threading.Event()
        self._state = threading.Lock()  # guards what follows
        self._scheduling = False
        #: Due steps no worker has taken yet, in the order they came due.
        self._pending: collections.deque[Any] = collections.deque()
        self._idle: list[threading.Event] = []
        self._workers = 0

    def add(self, hold: Any) -> None:
        """Renew ``hold`` on its schedule from now on."""
        self.schedule.add(hold)
        with self._state:
            start = not self._scheduling
            self._scheduling = True
        if start:
            start_thread(self.clock, self._schedule, (), self.name)
        self._wake.set()

    def remove(self, hold: Any) -> None:
        """Stop renewing ``hold`` (a step of it already running finishes)."""
        self.schedule.remove(hold)
        self._wake.set()

    def wait_idle(self, hold: Any, timeout: float) -> None:
        """Wait until no step of ``hold`` runs, for ``timeout`` seconds at most (not from
        within its own step: an ``on_lost`` that stops the hold)."""
        if not hold.idle.is_set() and hold.step_thread is threading.current_thread():
            return
        if hasattr(self.clock, "start_thread"):  # a simulation: its waits are its own
            self.clock.wait(hold.idle, timeout)
        else:
            hold.idle.wait(timeout)

    @property
    def threads(self) -> int:
        """The threads this renewer runs now (the scheduler's and its workers)."""
        with self._state:
            return int(self._scheduling) + self._workers

    def _schedule(self) -> None:
        while True:
            self._wake.clear()
            now = self.clock.monotonic()
            handed, soonest = self._hand_due(now)
            if soonest is None and not handed:
                with self._state:
                    if self.schedule.holds:  # one came in meanwhile: go on
                        continue
                    # Nothing left to renew: the idle workers end too.
                    self._scheduling = False
                    for go in self._idle:
                        go.set()
                    self._idle.clear()
                    return
            wait = LOOK_EVERY if soonest is None else min(soonest - now, LOOK_EVERY)
            if wait > 0:
                self.clock.wait(self._wake, wait)

    def _hand_due(self, now: float) -> tuple[bool, float | None]:
        """Hand the due steps to workers: whether any was, and when the next is due. (In a
        frame of its own: the scheduler's waits keep no hold alive, so a dropped one goes.)"""
        ready, soonest = self.schedule.due(now, self._tell)
        for hold in ready:
            self._hand(hold)
        return bool(ready), soonest

    def _tell(self, holds: list[Any]) -> None:
        """Run what follows the losses the scheduler declared (``on_lost``, which may stop its
        hold and so wait for its step) in a thread of their own: never in the scheduler's,
        which every other hold's renewals wait for."""
        start_thread(self.clock, _tell_lost, (holds,), f"{self.name}-lost")

    def _hand(self, hold: Any) -> None:
        """Queue ``hold``'s step for an idle worker, or a new one (up to ``MAX_WORKERS``;
        past that it waits for the first worker to be free)."""
        with self._state:
            self._pending.append(hold)
            if self._idle:
                self._idle.pop().set()
                return
            if self._workers >= MAX_WORKERS:
                return
            self._workers += 1
        start_thread(self.clock, self._work, (), f"{self.name}-worker")

    def _work(self) -> None:
        go = threading.Event()
        while True:
            with self._state:
                hold = self._pending.popleft() if self._pending else None
                if hold is None:
                    if not self._scheduling:  # nothing is scheduled any more: end
                        self._workers -= 1
                        return
                    go.clear()
                    self._idle.append(go)
            if hold is not None:
                self._step(hold)
                continue
            if not self.clock.wait(go, IDLE):
                with self._state:
                    if go in self._idle:  # nobody handed it work meanwhile: end
                        self._idle.remove(go)
                        self._workers -= 1
                        return

    def _step(self, hold: Any) -> None:
        try:
            hold._tick()
            hold.overdue()  # a renewal cut off at the deadline: lost now, not a hop later
        except Exception:  # a bug in a step must not end the worker that runs them all
            log.exception("renewal step of %r failed", getattr(hold, "lock_id", hold))
        finally:
            self.schedule.done(hold)
            self._wake.set()


def _tell_lost(holds: list[Any]) -> None:
    for hold in holds:
        try:
            hold._tell_lost()
        except Exception:
            log.exception("telling the loss of %r failed", getattr(hold, "lock_id", hold))


class AsyncRenewer:
    """The renewer of an asynchronous table: in each event loop that holds locks, one task
    schedules and each step is a task (a hold's steps run in its own loop, where its store's
    connections and its body are)."""

    def __init__(self, clock: Any, name: str = "awsflock-renewer") -> None:
        self.clock = clock
        self.name = name
        self._loops: weakref.WeakKeyDictionary[Any, _LoopRenewer] = weakref.WeakKeyDictionary()
        self._where: weakref.WeakKeyDictionary[Any, _LoopRenewer] = weakref.WeakKeyDictionary()

    def add(self, hold: Any) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        renewer = self._loops.get(loop)
        if renewer is None:
            renewer = self._loops[loop] = _LoopRenewer(self.clock, self.name)
        self._where[hold] = renewer
        renewer.add(hold, loop)

    def remove(self, hold: Any) -> None:
        renewer = self._where.pop(hold, None)
        if renewer is not None:
            renewer.remove(hold)

    async def wait_idle(self, hold: Any, timeout: float) -> None:
        """Wait until no step of ``hold`` runs, for ``timeout`` seconds at most."""
        import asyncio
        import time

        if hasattr(self.clock, "start_thread"):  # a simulation: its waits are its own
            await self.clock.wait_async(hold.idle, timeout)
            return
        end = time.monotonic() + timeout
        while not hold.idle.is_set() and time.monotonic() < end:
            await asyncio.sleep(0.005)


class _LoopRenewer:
    """The holds of one event loop: their scheduling task, and their step tasks."""

    def __init__(self, clock: Any, name: str) -> None:
        self.clock = clock
        self.name = name
        self.schedule = _Schedule()
        self._wake = threading.Event()
        self._task: Any = None
        self._steps: set[Any] = set()  # the running step tasks (held: tasks are weak)

    def add(self, hold: Any, loop: Any) -> None:
        self.schedule.add(hold)
        task = self._task
        if task is None or task.done():
            self._task = loop.create_task(self._schedule(), name=self.name)
        self._wake.set()

    def remove(self, hold: Any) -> None:
        self.schedule.remove(hold)
        self._wake.set()

    async def _schedule(self) -> None:
        import asyncio

        try:
            while True:
                self._wake.clear()
                now = self.clock.monotonic()
                started, soonest = self._start_due(now)
                if soonest is None and not started and not self.schedule.holds:
                    return
                wait = LOOK_EVERY if soonest is None else min(soonest - now, LOOK_EVERY)
                if wait > 0:
                    await self.clock.wait_async(self._wake, wait)
        finally:
            # Done: the task (and through it its loop, this renewer's key) is let go, so that
            # each ``asyncio.run`` on a long-lived table does not leave its loop behind.
            if self._task is asyncio.current_task():
                self._task = None

    def _start_due(self, now: float) -> tuple[bool, float | None]:
        """Start a task for each due step (in a frame of its own, as ``Renewer._hand_due``)."""
        import asyncio

        ready, soonest = self.schedule.due(now)
        for hold in ready:
            step = asyncio.get_running_loop().create_task(self._step(hold))
            self._steps.add(step)
            step.add_done_callback(self._steps.discard)
        return bool(ready), soonest

    async def _step(self, hold: Any) -> None:
        try:
            await hold._tick()
            hold.overdue()
        except Exception:
            log.exception("renewal step of %r failed", getattr(hold, "lock_id", hold))
        finally:
            self.schedule.done(hold)
            self._wake.set()
