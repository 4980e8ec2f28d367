"""The Redis store for ``awsflock.aio``: the same script, durability wait and settings check,
sent on ``redis.asyncio``'s connection (``AsyncRedisLink``), through the asynchronous request
layer (``stores.remote.connected_async``) and the step facade's asynchronous source. What a step
sends and what its answers mean stay the synchronous link's (``RedisLink.plan`` and ``read``);
only the sending is awaited. Made from a ``RedisStore`` (``awaited``), which it keeps for the
calls that are not lock steps."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from awsflock import errors
from awsflock.protocol_async import AsyncSleeper, AsyncWaker
from awsflock.stores.redis import durability, layout, wire
from awsflock.stores.redis.link import RedisConn, RedisLink, log
from awsflock.stores.redis.program import Request
from awsflock.stores.redis.store import RedisStore
from awsflock.stores.redis.wake_async import AsyncWake
from awsflock.stores.redis.wake_hub import Hub
from awsflock.stores.remote.facade_async import StepStore
from awsflock.stores.remote.link import Translated, driver


class AsyncRedisLink:
    """``RedisLink``'s connections made and used with ``redis.asyncio``."""

    def __init__(self, link: RedisLink, store: AsyncRedisStore) -> None:
        self.sync = link
        self.store = store

    def where(self) -> str:
        return self.sync.where()

    async def connect(self, timeout: float) -> RedisConn:
        """A connection, made and logged in now, its deployment checked (as ``RedisLink``)."""
        driver("redis", "Redis", "redis-py", "redis")
        import redis.asyncio as aredis

        owner = self.sync.store
        conn = RedisConn(self.sync.client(aredis, owner.request_timeout + 1, max(1.0, timeout)))
        try:
            pipe = conn.client.pipeline(transaction=False)
            durability.ask_check(pipe, owner.prefix)
            conn.facts, conn.layout = durability.read_check(
                await pipe.execute(raise_on_error=False)
            )
            conn.deployment = self.sync.classify(conn.facts)
            for note in conn.deployment.notes:
                log.warning("%s", note)
            conn.checked_mono = time.monotonic()
            pool = conn.client.connection_pool
            conn.wire = await wire.checkout_async(pool)  # the one the check used
            await pool.release(conn.wire)
        except BaseException:
            await self.close(conn)
            raise
        return conn

    async def close(self, conn: RedisConn) -> None:
        with contextlib.suppress(Exception):
            await conn.client.connection_pool.disconnect()

    def translate(self, exc: BaseException, *, operation: str, sent: bool) -> Translated:
        return self.sync.translate(exc, operation=operation, sent=sent)

    async def step(self, conn: RedisConn, request: Request, timeout: float) -> Any:
        """One step, as ``RedisLink.step``: the plan sent in one round trip, the script sent
        whole once if the server lost it (while the try's time lasts), the answers read."""
        plan = self.sync.plan(conn, request, timeout)
        answers = await _send(conn.wire, plan.commands)
        if plan.lost_script(answers):
            if not self.store.may_send():
                raise errors.EndpointUnreachable(
                    f"{self.where()} had lost awsflock's script, and the try's time ran out "
                    "before it could be sent again",
                    hint="retry",
                )
            answers = await _send(conn.wire, plan.commands_with_the_script())
        return self.sync.read(conn, plan, answers)


async def _send(conn: Any, commands: list[wire.Command]) -> list[Any]:
    """``wire.send``, awaited: the commands in one send on ``conn`` (a ``redis.asyncio``
    connection), each reply (an error reply in its place) read in turn; a failure of the
    connection itself raised, the connection closed."""
    import redis.exceptions as rx

    try:
        await conn.send_packed_command([wire.pack(commands)], check_health=False)
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except rx.ResponseError as refused:
                replies.append(refused)
            except (rx.BusyLoadingError, rx.AuthenticationError) as refused:
                replies.append(refused)
                closed = rx.ConnectionError("the connection was closed after an error reply")
                replies.extend(closed for _ in commands[len(replies) :])
                await conn.disconnect()  # the replies after it are unread (``wire.send``)
                break
    except BaseException:
        await conn.disconnect()
        raise
    return replies


class AsyncRedisStore(StepStore[Any]):
    """``store``'s lock steps, awaited on a ``redis.asyncio`` connection of its own."""

    kind = "redis"

    def __init__(self, store: RedisStore) -> None:
        self.sync = store
        self.table_name = store.table_name
        self.prefix = store.prefix
        self.request_timeout = store.request_timeout
        clock: Any = store.clock
        self.clock = clock
        self.server_time = store.server_time
        self.link: Any = AsyncRedisLink(store.link, self)
        self.program = store.program
        self._connected_init()
        #: The wakers of waits going on (``close_async`` closes its loop's).
        self._wakes: weakref.WeakSet[AsyncWake] = weakref.WeakSet()
        #: Each event loop's pub/sub connection, shared by its waiters (``wake_hub``).
        self._hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = (
            weakref.WeakKeyDictionary()
        )
        self._hubs_lock = threading.Lock()

    def waker(self, lock_id: str) -> AsyncWaker:
        """A waiter wakes as soon as the script publishes that the lock may have changed
        (``wake_async``); in the caller's time (a simulation's), it sleeps as on any store."""
        if not self.server_time:
            return AsyncSleeper()
        channel = layout.wake_channel(self.prefix, lock_id)
        wake = AsyncWake(self._hub, channel, self.where())
        self._wakes.add(wake)
        return wake

    def _hub(self) -> Hub:
        """The running loop's pub/sub connection, shared by its waiters."""
        loop = asyncio.get_running_loop()
        with self._hubs_lock:  # a loop in another thread may make its own meanwhile
            hub = self._hubs.get(loop)
            if hub is None:
                hub = self._hubs[loop] = Hub(self._subscriber, self.where(), self._in_background)
        return hub

    def _subscriber(self, timeout: float) -> Any:
        """A ``redis.asyncio`` pub/sub client for a loop's waiters, on a connection of its
        own."""
        import redis.asyncio as aredis

        return self.sync.link.client(aredis, timeout, timeout).pubsub()

    def _in_background(self, closing: Coroutine[Any, Any, None], now: Callable[[], None]) -> None:
        """Run a close in a task of this loop that ``close_async`` waits for; ``now`` if that
        task is cancelled (``wake_hub.Closing``)."""
        task = asyncio.get_running_loop().create_task(closing)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        task.add_done_callback(lambda done: now() if done.cancelled() else None)

    async def close_async(self) -> None:
        """Close this loop's connections, its waiters' shared pub/sub one among them (a waiter
        still waiting goes on polling)."""
        loop = asyncio.get_running_loop()
        for wake in list(self._wakes):
            if wake.loop is loop:
                wake.close()
        hub = self._hubs.get(loop)
        if hub is not None:
            hub.close()
        await super().close_async()

    def close(self) -> None:
        """Close the synchronous store's connection. An event loop's own connection is closed
        by ``close_async``, in that loop."""
        self.sync.close()
