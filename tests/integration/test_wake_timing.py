"""The Redis waker (``awsflock.stores.redis.wake``) on a fake subscription, timed on the real
clock: a pause ends at once when a message comes or the cancel is set, lasts its whole length
when nothing comes, and a broken subscription sleeps it out. These measure real time, so they
run with the integration tests (the fast tier has no test that depends on timing); the upper
bounds leave ``SLACK`` for a loaded machine, the lower ones none (a pause never ends early)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from awsflock.clock import SystemClock
from awsflock.protocol import WAKE_CHECK
from awsflock.stores.redis import wake

pytestmark = pytest.mark.integration

#: What a loaded machine may add to a pause that should end at once (or at its length).
SLACK = 1.0


class FakePubSub:
    """What ``wake.Wake`` uses of redis-py's PubSub: messages queued by the test, or a break."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.broken = False
        self.closed = False
        self.lock = threading.Lock()
        self.connection_pool = self

    def subscribe(self, channel: str) -> None:
        self.messages.insert(0, {"type": "subscribe", "channel": channel})

    def get_message(self, ignore_subscribe_messages: bool = False, timeout: float = 0.0) -> Any:
        end = time.monotonic() + timeout
        while True:
            if self.broken:
                raise ConnectionError("Connection closed by server.")
            with self.lock:
                if self.messages:
                    message = self.messages.pop(0)
                    if not (ignore_subscribe_messages and message["type"] == "subscribe"):
                        return message
                    continue
            if time.monotonic() >= end:
                return None
            time.sleep(0.005)

    def publish(self) -> None:
        with self.lock:
            self.messages.append({"type": "message", "data": b"end"})

    def close(self) -> None:
        self.closed = True

    def disconnect(self) -> None:
        pass


def _wake(pubsub: FakePubSub | None = None) -> tuple[wake.Wake, list[FakePubSub]]:
    made: list[FakePubSub] = []

    def subscriber(timeout: float) -> FakePubSub:
        made.append(pubsub or FakePubSub())
        return made[-1]

    return wake.Wake(subscriber, "p:{job}:wake", "Redis at test"), made


def _timed(waker: wake.Wake, seconds: float, cancel: threading.Event | None = None):
    start = time.monotonic()
    woken = waker.pause(SystemClock(), seconds, cancel)
    return woken, time.monotonic() - start


def test_the_redis_waker_subscribes_then_ends_a_pause_when_a_message_comes():
    waker, made = _wake()
    woken, took = _timed(waker, 1.0)
    assert woken and took < 0.5 + SLACK  # subscribed: poll once more at once
    woken, took = _timed(waker, 0.3)
    assert not woken and 0.29 <= took < 0.3 + SLACK  # nothing came: the whole pause, no longer
    threading.Timer(0.1, made[0].publish).start()
    woken, took = _timed(waker, 5.0)
    assert woken and took < 0.5 + SLACK
    waker.close()
    assert made[0].closed


def test_the_redis_waker_checks_the_cancel_while_it_listens():
    waker, _made = _wake()
    assert waker.pause(SystemClock(), 1.0, None)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    woken, took = _timed(waker, 5.0, cancel)
    assert not woken and took < 0.2 + WAKE_CHECK + SLACK


def test_a_broken_subscription_sleeps_the_pause_out_and_is_made_again_later(monkeypatch):
    monkeypatch.setattr(wake, "RETRY_AFTER", 0.5)
    waker, made = _wake()
    assert waker.pause(SystemClock(), 1.0, None)
    made[0].broken = True
    woken, took = _timed(waker, 0.3)
    assert not woken and 0.29 <= took < 0.3 + SLACK and made[0].closed
    woken, took = _timed(waker, 0.3)  # not again yet: sleeps
    assert not woken and len(made) == 1
    woken, _took = _timed(waker, 1.0)  # RETRY_AFTER later: subscribed again
    assert woken and len(made) == 2


def test_a_subscription_that_cannot_be_made_sleeps_the_pause_out():
    def refused(timeout: float) -> Any:
        raise ConnectionError("Connection refused")

    waker = wake.Wake(refused, "p:{job}:wake", "Redis at test")
    woken, took = _timed(waker, 0.3)
    assert not woken and 0.29 <= took < 0.3 + SLACK
    waker.close()
