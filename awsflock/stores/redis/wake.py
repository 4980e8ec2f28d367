"""Waking a Redis waiter as soon as the lock may have changed: a subscription to the lock's
channel (``layout.wake_channel``), where the step script publishes when a lease ends, a pool slot
frees or the line moves on.

A ``Wake`` is the ``Waker`` of one waiting acquire (``RedisStore.waker``). On its first pause it
subscribes on a connection of its own, made in a thread of its own so that the pause still
checks ``cancel`` every ``WAKE_CHECK``; once subscribed it ends that pause at once, so that an
end which came just before the subscription is not missed. Each later pause ends when a message
comes, or when the pause the engine asked for is over, never later. A message is only a hint:
the engine then polls through the script, which checks everything; one that is lost costs the
usual poll. A subscription that cannot be made, or breaks (its connection killed), falls back
to sleeping the pause out, and is made again ``RETRY_AFTER`` later. ``close`` (the wait is
over) closes the connection.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable

from awsflock.clock import Clock
from awsflock.protocol import WAKE_CHECK, Sleeper

log = logging.getLogger("awsflock.store")

#: The longest that connecting, logging in and subscribing may take (each).
SUBSCRIBE_TIMEOUT = 2.0
#: How long after a subscription failed or broke it is tried again (the waiter polls meanwhile).
RETRY_AFTER = 10.0


class Wake:
    """A waiter's subscription to one lock's channel. ``subscriber(timeout)`` makes the pub/sub
    client (unconnected); ``where`` names the server in messages."""

    def __init__(self, subscriber: Callable[[float], Any], channel: str, where: str) -> None:
        self._subscriber = subscriber
        self.channel = channel
        self.where = where
        self._lock = threading.Lock()
        self._closed = False
        #: The subscription once made (None: not yet, or it broke).
        self._pubsub: Any = None
        #: Set once the subscribing thread is done (``_failed`` says whether it failed).
        self._made: threading.Event | None = None
        self._failed: BaseException | None = None
        #: When (the clock's monotonic time) a failed subscription may be tried again.
        self._retry_at: float | None = None

    def pause(self, clock: Clock, seconds: float, cancel: threading.Event | None) -> bool:
        end = clock.monotonic() + max(0.0, seconds)
        try:
            if self._pubsub is None and self._may_subscribe(clock):
                if self._subscribing(clock, end, cancel):
                    return True  # poll once more: an end before the subscription is missed
            elif self._pubsub is not None:
                return self._listen(clock, end, cancel)
        except Exception as exc:  # a broken subscription only costs the wake
            self._broken(clock, exc)
        left = end - clock.monotonic()
        if left > 0 and not (cancel is not None and cancel.is_set()):
            Sleeper().pause(clock, left, cancel)
        return False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pubsub, self._pubsub = self._pubsub, None
        _close(pubsub)

    def _may_subscribe(self, clock: Clock) -> bool:
        return self._retry_at is None or clock.monotonic() >= self._retry_at

    def _subscribing(self, clock: Clock, end: float, cancel: threading.Event | None) -> bool:
        """Make the subscription (in a thread), waiting for it within the pause; True once it
        is made. A subscription still being made when the pause ends is waited for by the
        next pause."""
        if self._made is None:
            self._made, self._failed = threading.Event(), None
            threading.Thread(
                target=self._subscribe, args=(self._made,), name="awsflock-wake", daemon=True
            ).start()
        made = self._made
        while not made.is_set():
            if cancel is not None and cancel.is_set():
                return False
            left = end - clock.monotonic()
            if left <= 0:
                return False
            made.wait(min(WAKE_CHECK, left))
        self._made = None
        if self._failed is not None:
            raise self._failed
        return self._pubsub is not None

    def _subscribe(self, made: threading.Event) -> None:
        """In a thread of its own: connect, log in, subscribe and see it confirmed."""
        pubsub = None
        try:
            pubsub = self._subscriber(SUBSCRIBE_TIMEOUT)
            pubsub.subscribe(self.channel)
            # Confirmed: from here on every message published on the channel reaches us.
            message = pubsub.get_message(timeout=SUBSCRIBE_TIMEOUT)
            if message is None or message.get("type") != "subscribe":
                raise TimeoutError(f"no confirmation of SUBSCRIBE {self.channel}: {message!r}")
        except BaseException as exc:  # handed to the waiting thread
            _close(pubsub)
            self._failed = exc
        else:
            with self._lock:
                if self._closed:  # the wait ended meanwhile
                    _close(pubsub)
                else:
                    self._pubsub = pubsub
        made.set()

    def _listen(self, clock: Clock, end: float, cancel: threading.Event | None) -> bool:
        """Wait for a message until ``end``; True if one came."""
        while not (cancel is not None and cancel.is_set()):
            left = end - clock.monotonic()
            if left <= 0:
                break
            message = self._pubsub.get_message(
                ignore_subscribe_messages=True, timeout=min(WAKE_CHECK, left)
            )
            if message is not None:
                return True
        return False

    def _broken(self, clock: Clock, exc: BaseException) -> None:
        with self._lock:
            pubsub, self._pubsub = self._pubsub, None
        _close(pubsub)
        self._retry_at = clock.monotonic() + RETRY_AFTER
        log.debug(
            "%s: no wake-up on release for now (%s); polling",
            self.where,
            str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        )


def _close(pubsub: Any) -> None:
    if pubsub is not None:
        with contextlib.suppress(Exception):
            pubsub.close()
        with contextlib.suppress(Exception):
            pubsub.connection_pool.disconnect()
