"""A fake of what the shared Redis wake (``stores.redis.wake_hub``) uses of ``redis.asyncio``'s
PubSub, and of the server behind it: commands are applied in order (at once, or when the test
lets them through: ``hold``), each answered by its reply; a message published reaches the
connection only while the server has it subscribed to the channel. Nothing here waits for real
time: a read waits until there is something to read. ``ManualClock``: a fake clock whose
asynchronous sleeps end only when the test moves it on."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from awsflock.clock import FakeClock


class FakePubSub:
    def __init__(self, server: FakeServer) -> None:
        self.server = server
        #: Reads find nothing, each moving the server's clock by its timeout, until this
        #: time on it (None: a read waits until there is something to read).
        self.silent_until: float | None = None
        #: PINGs go unanswered.
        self.mute = False
        #: The channels the server has this connection subscribed to.
        self.channels: set[str] = set()
        #: Commands sent, in order, as ("SUBSCRIBE", "a", "b").
        self.sent: list[tuple[str, ...]] = []
        #: Commands sent that the server has not applied yet.
        self.wire: list[tuple[str, ...]] = []
        self.hold = False
        #: Set by the test: an UNSUBSCRIBE's send waits for it, and loses a cancellation.
        self.gate: asyncio.Event | None = None
        self.replies: asyncio.Queue[Any] = asyncio.Queue()
        self.reading = False
        self.closed = False
        self.closed_under_a_read = False
        self.connection_pool = self

    async def subscribe(self, *channels: str) -> None:
        self._send("SUBSCRIBE", *channels)

    async def ping(self) -> None:
        self._send("PING")

    async def unsubscribe(self, *channels: str) -> None:
        self._send("UNSUBSCRIBE", *channels)
        if self.gate is not None:  # the send takes until the test opens the gate
            # A cancellation is lost here, as asyncio.wait_for can lose one up to Python 3.11.
            with contextlib.suppress(asyncio.CancelledError):
                await self.gate.wait()

    def _send(self, *command: str) -> None:
        if self.closed or self.server.refuse:
            raise ConnectionError("Connection refused")
        self.sent.append(command)
        self.wire.append(command)
        if not self.hold:
            self.flow()

    def flow(self, count: int | None = None) -> None:
        """The server applies the commands on the wire (the first ``count``), in order, and
        answers each."""
        count = len(self.wire) if count is None else count
        wire, self.wire = self.wire[:count], self.wire[count:]
        for verb, *channels in wire:
            if verb == "PING" and not self.mute:
                self.replies.put_nowait({"type": "pong", "channel": None, "data": b""})
            for channel in channels:
                if verb == "SUBSCRIBE":
                    self.channels.add(channel)
                else:
                    self.channels.discard(channel)
                kind = verb.lower()
                self.replies.put_nowait({"type": kind, "channel": channel.encode()})

    async def get_message(self, timeout: float | None = 0.0) -> Any:
        clock = self.server.clock
        silent = self.silent_until is not None and clock.monotonic() < self.silent_until
        if self.replies.empty() and silent and timeout is not None:
            clock.advance(timeout)
            await asyncio.sleep(0)
            return None
        self.reading = True
        try:
            reply = await self.replies.get()
        finally:
            self.reading = False
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def go_silent(self, until: float) -> None:
        """Reads find nothing until ``until`` (the one under way too)."""
        self.silent_until = until
        self.replies.put_nowait(None)

    def deliver(self, channel: str) -> bool:
        if channel not in self.channels or self.closed:
            return False
        self.replies.put_nowait({"type": "message", "channel": channel.encode(), "data": b"end"})
        return True

    def kill(self) -> None:
        self.channels.clear()
        self.replies.put_nowait(ConnectionError("Connection closed by server."))

    async def aclose(self) -> None:
        self.closed = True
        self.channels.clear()
        self.closed_under_a_read = self.closed_under_a_read or self.reading

    async def disconnect(self) -> None:
        pass


class FakeServer:
    """The connections made (``made``), as the store's ``subscriber`` makes them."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.made: list[FakePubSub] = []
        self.refuse = False
        #: New connections start holding their commands.
        self.hold = False

    def __call__(self, timeout: float) -> FakePubSub:
        if self.refuse:
            raise ConnectionError("Connection refused")
        self.made.append(FakePubSub(self))
        self.made[-1].hold = self.hold
        return self.made[-1]

    def publish(self, channel: str) -> int:
        """As PUBLISH: how many connections it reached."""
        return sum(pubsub.deliver(channel) for pubsub in self.made)

    def open(self) -> list[FakePubSub]:
        return [pubsub for pubsub in self.made if not pubsub.closed]


class Background:
    """The store's side of ``closing``: the closes started, to be awaited."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []

    def __call__(self, closing: Any, now: Any) -> None:
        task = asyncio.get_running_loop().create_task(closing)
        task.add_done_callback(lambda done: now() if done.cancelled() else None)
        self.tasks.append(task)

    async def done(self) -> None:
        await asyncio.gather(*self.tasks)


class ManualClock(FakeClock):
    """A fake clock whose ``sleep_async`` ends only once the test moved it on (``advance``)."""

    def __init__(self) -> None:
        super().__init__()
        self._moved: asyncio.Event | None = None

    async def sleep_async(self, seconds: float) -> None:
        until = self.monotonic() + max(0.0, seconds)
        while self.monotonic() < until:
            if self._moved is None:
                self._moved = asyncio.Event()
            await self._moved.wait()

    def advance(self, seconds: float) -> None:
        super().advance(seconds)
        moved, self._moved = self._moved, None
        if moved is not None:
            moved.set()


async def settle() -> None:
    """Let every task that can run, run (bounded)."""
    for _ in range(50):
        await asyncio.sleep(0)
