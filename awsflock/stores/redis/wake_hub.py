"""The pub/sub connection that an event loop's Redis waiters share (``wake_async.AsyncWake``):
one per (store, event loop), however many tasks of that loop wait, on however many locks.

A ``Hub`` belongs to one loop and keeps its current ``Shared`` connection: made when a waiter
joins and there is none, closed when its last waiter leaves, when the table is closed
(``close_async``), or when it breaks (then none is made again before ``RETRY_AFTER``; the
waiters sleep their pauses out meanwhile). A ``Shared`` connection has two tasks: one sends
SUBSCRIBE and UNSUBSCRIBE in the order they were asked for (a channel is subscribed while
anybody waits on it, once), the other reads every reply and message and hands it on to the
waiters of its channel. The server answers a connection's commands in order, so each channel
counts the SUBSCRIBEs asked for and the confirmations heard: a waiter relies on the
subscription only once the reply to the SUBSCRIBE made after it joined (or before, if none was
undone since) has come, even when an UNSUBSCRIBE and a SUBSCRIBE of one channel cross on the
wire. A connection quiet for ``KEEPALIVE`` is PINGed, and one whose reply (to a PING or a
command) is ``SUBSCRIBE_TIMEOUT`` late is given up as broken: shared, it may live as long as the
service waits, and one that died silently must not cost every later waiter its wake.

Nothing here blocks the loop. A close stops both tasks before it closes the connection, as
redis-py's pub/sub, closed under a read, connects and subscribes again on its own; the tasks
also stop by themselves once they see it closed, as redis-py can lose a cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Coroutine, Iterator
from typing import Any, Callable, Protocol

from awsflock.clock import Clock
from awsflock.protocol import WAKE_CHECK
from awsflock.stores.redis.wake import RETRY_AFTER, SUBSCRIBE_TIMEOUT, log

#: Runs a close (a coroutine) in a task of the running loop that the store's ``close_async``
#: waits for; if that task is cancelled (``asyncio.run`` cancels the tasks left as its coroutine
#: returns, maybe before they ran at all), calls the second argument, which closes at once.
Closing = Callable[[Coroutine[Any, Any, None], Callable[[], None]], None]
#: The longest one read of the shared connection waits (it then reads again).
READ_SLICE = 1.0
#: After this long with nothing heard, the shared connection is PINGed: a connection that
#: died silently (no reset: a host or network gone) is found out and made again.
KEEPALIVE = 30.0
#: A waiter's ticket once its channel's subscription is confirmed.
CONFIRMED = 0


class AsyncWake(Protocol):
    """What the shared connection knows of a waiter (``wake_async.AsyncWake``)."""

    channel: str

    def confirmed(self) -> None:
        """Its channel's subscription is confirmed."""

    def woken(self) -> None:
        """A message came on its channel."""

    def lost(self, conn: Shared) -> None:
        """``conn`` broke or was closed."""


class Hub:
    """One event loop's shared pub/sub connection, made again as needed. ``subscriber(timeout)``
    makes the ``redis.asyncio`` pub/sub client (unconnected); ``where`` names the server."""

    def __init__(self, subscriber: Callable[[float], Any], where: str, closing: Closing) -> None:
        # Weakly: the store keeps its hubs by loop, weakly too, so the loop can go.
        self._loop = weakref.ref(asyncio.get_running_loop())
        self.subscriber = subscriber
        self.where = where
        self.closing = closing
        #: The connection of this loop's waiters (None: none now).
        self.conn: Shared | None = None
        #: When (the waiters' clock's monotonic time) a broken connection may be made again.
        self._retry_at: float | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop()
        assert loop is not None  # only used in it
        return loop

    def join(self, wake: AsyncWake, clock: Clock) -> Shared | None:
        """``wake`` waits on its channel over the shared connection (made if need be); None if
        none may be made now (the last one broke less than ``RETRY_AFTER`` ago)."""
        conn = self.conn
        if conn is None:
            if self._retry_at is not None and clock.monotonic() < self._retry_at:
                return None
            conn = self.conn = Shared(self, clock)
        conn.join(wake)
        return conn

    def broke(self, clock: Clock, exc: BaseException) -> None:
        self._retry_at = clock.monotonic() + RETRY_AFTER
        log.debug(
            "%s: no wake-up on release for now (%s); polling",
            self.where,
            str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        )

    def close(self) -> None:
        """Close the connection now, if any (its waiters sleep their pauses out)."""
        if self.conn is not None:
            self.conn.close()


class _Channel:
    """One channel on the shared connection: who waits on it and where its commands stand."""

    def __init__(self, name: str) -> None:
        self.name = name
        #: Each waiter, and the count of SUBSCRIBEs whose reply confirms it (its ticket), or
        #: ``CONFIRMED``.
        self.waiters: dict[AsyncWake, int] = {}
        #: The last command asked for is SUBSCRIBE (the server will have it subscribed).
        self.subscribed = False
        self.asked = 0  # SUBSCRIBEs asked for
        self.heard = 0  # their confirmations heard
        self.due = 0  # replies still to come (SUBSCRIBE and UNSUBSCRIBE)


class Shared:
    """One pub/sub connection and its waiters (see the module's docstring)."""

    def __init__(self, hub: Hub, clock: Clock) -> None:
        self.hub = hub
        self.clock = clock
        self.closed = False
        self.pubsub: Any = None
        self._channels: dict[str, _Channel] = {}
        #: Commands to send, in order: (SUBSCRIBE, UNSUBSCRIBE or PING, channel).
        self._asks: list[tuple[str, str]] = []
        #: Replies still to come; since when (the clock's time) none came although they were
        #: sent; when anything was last heard.
        self._due = 0
        self._since: float | None = None
        self._heard_at = clock.monotonic()
        self._asked = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._writer = hub.loop.create_task(self._write())

    def join(self, wake: AsyncWake) -> None:
        channel = self._channels.get(wake.channel)
        if channel is None:
            channel = self._channels[wake.channel] = _Channel(wake.channel)
        if not channel.subscribed:
            self._ask(channel, subscribe=True)
        if channel.heard >= channel.asked:  # subscribed and confirmed already
            channel.waiters[wake] = CONFIRMED
            wake.confirmed()
        else:
            channel.waiters[wake] = channel.asked

    def leave(self, wake: AsyncWake) -> None:
        """``wake`` waits no more: its channel unsubscribed if nobody else waits on it, the
        connection closed if nobody waits at all."""
        channel = self._channels.get(wake.channel)
        if channel is None or channel.waiters.pop(wake, None) is None:
            return
        if not any(other.waiters for other in self._channels.values()):
            self.close()
        elif not channel.waiters and channel.subscribed:
            self._ask(channel, subscribe=False)

    def waiters(self) -> Iterator[AsyncWake]:
        for channel in self._channels.values():
            yield from channel.waiters

    def close(self) -> None:
        """Close the connection (in a task: ``Hub.closing``); its waiters lose their wake."""
        if self.closed:
            return
        self.closed = True
        if self.hub.conn is self:
            self.hub.conn = None
        waiters = list(self.waiters())
        self._channels.clear()
        for wake in waiters:
            wake.lost(self)
        self._asked.set()  # the writer sees ``closed``
        self.hub.closing(self._shut(), self._shut_now)

    def _ask(self, channel: _Channel | None, *, subscribe: bool) -> None:
        """Have a command sent: SUBSCRIBE or UNSUBSCRIBE ``channel``, or PING (None)."""
        if channel is not None:
            channel.subscribed = subscribe
            channel.asked += subscribe
            channel.due += 1
        self._due += 1
        verb = "PING" if channel is None else "SUBSCRIBE" if subscribe else "UNSUBSCRIBE"
        self._asks.append((verb, "" if channel is None else channel.name))
        self._asked.set()

    async def _write(self) -> None:
        """Send the commands asked for, in order (a run of one kind in one command); start
        reading once the first is sent (the connection is made then)."""
        try:
            self.pubsub = self.hub.subscriber(SUBSCRIBE_TIMEOUT)
            while not self.closed:
                await self._asked.wait()
                self._asked.clear()
                asks, self._asks = self._asks, []
                for verb, names in _runs(asks):
                    if verb == "SUBSCRIBE":
                        await self.pubsub.subscribe(*names)
                    elif verb == "UNSUBSCRIBE":
                        await self.pubsub.unsubscribe(*names)
                    else:
                        await self.pubsub.ping()
                if self._since is None and self._due > 0:  # sent: the replies' time runs
                    self._since = self.clock.monotonic()
                if self._reader is None and not self.closed:
                    self._reader = self.hub.loop.create_task(self._read())
        except Exception as exc:  # a broken connection only costs the wake
            self._broken(exc)

    async def _read(self) -> None:
        try:
            while not self.closed:
                message = await self.pubsub.get_message(timeout=READ_SLICE)
                if message is not None:
                    self._heard(message)
                self._check()
        except Exception as exc:
            self._broken(exc)

    def _check(self) -> None:
        """Give the connection up if a reply is late; PING it after a long silence."""
        now = self.clock.monotonic()
        if self._since is not None and now - self._since > SUBSCRIBE_TIMEOUT:
            raise TimeoutError(f"no answer on the pub/sub connection in {SUBSCRIBE_TIMEOUT:g} s")
        if self._due == 0 and now - self._heard_at >= KEEPALIVE:
            self._ask(None, subscribe=False)

    def _heard(self, message: dict[str, Any]) -> None:
        """A message (its channel's waiters are woken), or the reply to a command."""
        kind = message.get("type")
        self._heard_at = self.clock.monotonic()
        if kind in ("subscribe", "unsubscribe", "pong"):
            self._due -= 1
            self._since = None if self._due <= 0 else self._heard_at
        name = message.get("channel")
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        channel = self._channels.get(str(name))
        if channel is None:
            return
        if kind == "message":
            for wake in list(channel.waiters):
                wake.woken()
        elif kind == "subscribe":
            channel.due -= 1
            channel.heard += 1
            for wake, ticket in list(channel.waiters.items()):
                if ticket != CONFIRMED and ticket <= channel.heard:
                    channel.waiters[wake] = CONFIRMED
                    wake.confirmed()
        elif kind == "unsubscribe":
            channel.due -= 1
        if not channel.waiters and channel.due <= 0:
            del self._channels[channel.name]

    def _broken(self, exc: BaseException) -> None:
        if self.closed:
            return  # closed meanwhile: not a break
        self.hub.broke(self.clock, exc)
        self.close()

    async def _shut(self) -> None:
        """Stop sending and reading, then close the connection. A cancellation can be lost
        in redis-py (one that comes as a send ends, on Python 3.11 and before): it is made
        again until the task ends, as it does by itself once it sees ``closed``."""
        running = {task for task in (self._writer, self._reader) if task is not None}
        while running:
            for task in running:
                task.cancel()
            _, running = await asyncio.wait(running, timeout=WAKE_CHECK)
        await aclose(self.pubsub)

    def _shut_now(self) -> None:
        """``_shut`` where its task was cancelled: both tasks cancelled and the connection
        closed without waiting, so that the server drops its subscriptions now, not when a
        garbage collection finds the client (found by an adversarial review: ``asyncio.run``
        ending as its last waiter gave up)."""
        for task in (self._writer, self._reader):
            if task is not None:
                task.cancel()
        close_now(self.pubsub)


def _runs(asks: list[tuple[str, str]]) -> Iterator[tuple[str, list[str]]]:
    """The commands asked for as runs of one verb, in order (a PING alone)."""
    run: list[str] = []
    verb = ""
    for asked, name in asks:
        if run and (asked != verb or verb == "PING"):
            yield verb, run
            run = []
        verb = asked
        run.append(name)
    if run:
        yield verb, run


async def aclose(pubsub: Any) -> None:
    """Close a pub/sub client and its connection; a failure to is not news."""
    if pubsub is None:
        return
    with contextlib.suppress(Exception):
        closing = getattr(pubsub, "aclose", None)  # redis-py 5.0.1 on; reset() before
        await (closing() if closing is not None else pubsub.reset())
    with contextlib.suppress(Exception):
        await pubsub.connection_pool.disconnect()


def close_now(pubsub: Any) -> None:
    """Close a pub/sub client's connection without awaiting (redis.asyncio's ``_close``: its
    transport closed; the loop then closes the socket)."""
    conn = getattr(pubsub, "connection", None)
    close = getattr(conn, "_close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            close()
