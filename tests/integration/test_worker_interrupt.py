"""A try of a request thread (the DynamoDB store's: awsflock/stores/remote/worker.py) given up
by Ctrl-C before its thread took it up is never sent, as one given up at its deadline: the
gate holds for a KeyboardInterrupt too. (No server: the try is a function that says it ran.)"""

from __future__ import annotations

import threading
import time

import pytest

from awsflock.stores.remote import worker


def test_a_try_given_up_by_ctrl_c_before_its_thread_took_it_is_never_sent(monkeypatch):
    go = threading.Event()
    start = worker.request_thread

    def slow_to_start(target, *args):  # the request thread is busy for a moment
        def later() -> None:
            go.wait(10)
            target(*args)

        return start(later)

    monkeypatch.setattr(worker, "request_thread", slow_to_start)

    class CtrlC(threading.Event):  # Ctrl-C while the caller waits (no real signal: xdist's
        def wait(self, timeout=None):  # workers may ignore SIGINT)
            time.sleep(0.2)
            raise KeyboardInterrupt

    made = worker._Job.__init__

    def with_ctrl_c(self, call, announced) -> None:
        made(self, call, announced)
        self.done = CtrlC()

    monkeypatch.setattr(worker._Job, "__init__", with_ctrl_c)
    sent = threading.Event()
    pool = worker.Workers()
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.run(sent.set, 5.0, "the server", False)
    finally:
        go.set()
    time.sleep(0.3)  # the thread now takes the try up
    assert not sent.is_set(), "the try was sent after its caller gave it up"
