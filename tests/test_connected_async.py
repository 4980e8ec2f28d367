"""The asynchronous request layer (``stores/remote/connected_async.py``) on a fake link: a step
cancelled while it is on the wire lands before the cancellation goes on (however many come),
so nothing the caller sends next can overtake it; a step still unanswered at its time is cut
off, its connection closed, and counted as maybe applied; a try refused at the gate was never
sent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from awsflock import errors
from awsflock.clock import SystemClock
from awsflock.stores.remote.connected_async import AsyncConnected
from awsflock.stores.remote.link import Translated


class FakeLink:
    def __init__(self) -> None:
        self.made = 0
        self.closed: list[int] = []

    def where(self) -> str:
        return "the fake server"

    async def connect(self, timeout: float) -> int:
        self.made += 1
        return self.made

    async def close(self, conn: int) -> None:
        self.closed.append(conn)

    def translate(self, exc: BaseException, *, operation: str, sent: bool) -> Translated:
        err = errors.EndpointUnreachable(str(exc))
        err.maybe_applied = sent
        return Translated(err, broken=True)


class Store(AsyncConnected[int]):
    #: Its name in metrics (recorded once anything in the process imported OpenTelemetry).
    kind = "fake"

    def __init__(self, timeout: float = 5.0) -> None:
        self.link = FakeLink()
        self.clock: Any = SystemClock()
        self.request_timeout = timeout
        self._connected_init()


def test_a_step_cancelled_on_the_wire_lands_before_the_cancellation_goes_on():
    said: list[str] = []

    async def main() -> None:
        store = Store()
        landing, sent = asyncio.Event(), asyncio.Event()

        async def step(conn: int) -> str:
            said.append("sent")
            sent.set()
            await landing.wait()
            said.append("landed")
            return "ok"

        task = asyncio.create_task(store._send("take", step))
        await sent.wait()
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()  # a second cancellation (a timeout and a TaskGroup)
        await asyncio.sleep(0)
        assert not task.done()  # still waiting for the step on the wire
        landing.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        said.append("cancelled")
        assert store.link.closed == []  # it answered: the connection is whole

    asyncio.run(main())
    assert said == ["sent", "landed", "cancelled"]


def test_a_step_cancelled_on_the_wire_that_then_fails_never_leaves_its_connection():
    # Whatever the failure (awsflock's own too: a link that stopped reading early may have
    # replies left unread), the cancellation goes on and the connection is closed.
    async def main() -> None:
        store = Store()
        landing, sent = asyncio.Event(), asyncio.Event()

        async def step(conn: int) -> str:
            sent.set()
            await landing.wait()
            failed = errors.EndpointUnreachable("the settings read again were unreadable")
            failed.maybe_applied = True
            raise failed

        task = asyncio.create_task(store._send("take", step))
        await sent.wait()
        task.cancel()
        await asyncio.sleep(0)
        landing.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store.link.closed == [1]

    asyncio.run(main())


def test_a_step_unanswered_at_its_time_is_cut_off_and_may_have_applied():
    async def main() -> None:
        store = Store(timeout=0.05)

        async def step(conn: int) -> str:
            await asyncio.Event().wait()  # never answers
            return "never"

        with pytest.raises(errors.EndpointUnreachable) as failed:
            await store._send("take", step)
        assert failed.value.maybe_applied
        assert store.link.closed == [1]  # mid-reply: never used again
        assert store._in_doubt()

    asyncio.run(main())


def test_a_try_whose_time_ran_out_before_it_was_sent_never_left():
    async def main() -> None:
        store = Store(timeout=0.05)
        sent: list[int] = []
        store._line()
        lines = store._lines[asyncio.get_running_loop()].lines
        for line in lines:  # other tries hold every connection past this one's time
            await line.lock.acquire()

        async def step(conn: int) -> str:
            sent.append(conn)
            return "ok"

        with pytest.raises(errors.EndpointUnreachable) as failed:
            await store._send("take", step)
        for line in lines:
            line.lock.release()
        assert not failed.value.maybe_applied and sent == []

    asyncio.run(main())


def test_the_budget_is_the_task_s_own():
    async def main() -> None:
        store = Store()
        loop = asyncio.get_running_loop()

        async def other() -> float | None:
            from awsflock.stores.remote import connected_async

            return connected_async._END.get()

        with store.budget(loop.time() + 1):
            inner = await asyncio.create_task(other())  # a task started inside inherits it
        assert inner is not None
        assert await asyncio.create_task(other()) is None  # one started outside does not

    asyncio.run(main())


def test_tasks_sending_at_once_use_connections_of_their_own():
    # One connection per event loop made 200 lock tasks send one at a time. A step stuck on
    # the wire now holds up only its own connection; tasks that send one after another keep
    # reusing one; four at once are inside four connections together.
    from awsflock.stores.remote.connected import CONNECTIONS

    async def main() -> None:
        store = Store(timeout=30)
        let_go = asyncio.Event()
        inside = asyncio.Event()
        together = asyncio.Barrier(4) if hasattr(asyncio, "Barrier") else None
        met: list[int] = []

        async def stuck(conn: int) -> str:
            inside.set()
            await let_go.wait()
            return "late"

        async def quick(conn: int) -> int:
            return conn

        async def meet(conn: int) -> int:
            met.append(conn)
            if together is not None:
                await asyncio.wait_for(together.wait(), 30)
            else:
                while len(met) < 4:
                    await asyncio.sleep(0.001)
            return conn

        first = asyncio.create_task(store._send("take", stuck))
        await asyncio.wait_for(inside.wait(), 30)
        assert [await store._send("read", quick) for _ in range(3)] == [2, 2, 2]
        got = await asyncio.gather(*(store._send("read", meet) for _ in range(4)))
        assert len(set(got)) == 4 and store.link.made == 5 <= CONNECTIONS
        let_go.set()
        assert await first == "late"
        await store.close_async()
        assert sorted(store.link.closed) == [1, 2, 3, 4, 5]

    asyncio.run(main())


def test_a_step_cancelled_from_outside_never_leaves_its_connection_in_use():
    # Found by the review of the pools (h20): asyncio.run's end cancels every task once, the
    # step's own task too; one cancelled after it was sent may have stopped mid-reply, but its
    # connection was kept, and the next step on it could read the late reply as its own.
    async def main() -> None:
        store = Store(timeout=30)
        inside = asyncio.Event()

        async def stuck(conn: int) -> str:
            inside.set()
            await asyncio.Event().wait()
            return "never"

        sending = asyncio.create_task(store._send("take", stuck))
        await asyncio.wait_for(inside.wait(), 30)
        (step,) = [
            task
            for task in asyncio.all_tasks()
            if task is not sending and task is not asyncio.current_task()
        ]
        step.cancel()  # the sweep reaches the step's task, not the caller's
        with pytest.raises(asyncio.CancelledError):
            await sending
        assert store.link.closed == [1]  # its connection closed, never used again

        async def quick(conn: int) -> int:
            return conn

        assert await store._send("read", quick) == 2  # a new one

    asyncio.run(main())


def test_a_loop_that_ends_without_aclose_closes_its_connections():
    # asyncio.run again and again, the store never closed: each loop's connection is closed
    # as the loop ends (it was left to the garbage collector, with a ResourceWarning).
    store = Store()

    async def main() -> None:
        async def step(conn: int) -> str:
            return "ok"

        assert await store._send("take", step) == "ok"

    for runs in range(1, 4):
        asyncio.run(main())
        assert store.link.closed == list(range(1, runs + 1))


def test_connections_made_after_an_aclose_are_not_closed_by_the_earlier_state():
    store = Store()

    async def step(conn: int) -> int:
        return conn

    async def main() -> None:
        assert await store._send("take", step) == 1
        await store.close_async()
        assert await store._send("take", step) == 2  # made anew
        import gc

        gc.collect()  # the first state's keeper is finalized in the loop: it must do nothing
        for _ in range(3):
            await asyncio.sleep(0)
        assert store.link.closed == [1]

    asyncio.run(main())
    assert store.link.closed == [1, 2]  # the second, as the loop ended
