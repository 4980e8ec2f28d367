"""The in-memory store's fault layer: it has no network code of its own, so the simulation
gives it one. ``FaultyMemory`` is the production request layer (``RetryingStore``: budgets,
backoff, retries, doubt per call and per step) over the shared ``MemoryStore``, each try
meeting its fault here. Every public method of the store is reached through it unchanged
(nothing is restated): a call is ``_send`` of the method, and an answered call whose earlier
try may still land says so (``Outcome.in_doubt``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Callable

from awsflock import errors
from awsflock.protocol import Outcome
from awsflock.stores.memory import MemoryStore
from awsflock.stores.remote.requests import RetryingStore
from tests.simulation.network import Network, Tap
from tests.simulation.world import Proc

#: What is not a request: reached directly.
DIRECT = {"create", "actor", "where", "close"}


class FaultyMemory(RetryingStore):
    """One process's way to the shared in-memory store."""

    def __init__(self, inner: MemoryStore, network: Network, proc: Proc, timeout: float = 5.0):
        self.inner = inner
        self.network = network
        self.world = network.world
        self.proc = proc
        self.request_timeout = timeout
        self.clock: Any = proc.clock
        self._local = threading.local()
        self._retry_rng = network.world.rng  # backoff jitter from the seeded source
        self.tap: Tap | None = None  # set by ``attach``

    def actor(self) -> str | None:
        return None

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        method = getattr(self.inner, name)
        if name.startswith("_") or name in DIRECT or not callable(method):
            return method

        def call(*args: Any, **kw: Any) -> Any:
            with self.step():
                result = self._send(name, lambda: lambda: _settled(method(*args, **kw)))
                if isinstance(result, Outcome) and self._in_doubt():
                    result = replace(result, in_doubt=True)
                elif isinstance(result, tuple) and self._in_doubt():  # a set's step
                    result = tuple(replace(o, in_doubt=True) for o in result)
                return iter(result) if isinstance(result, list) else result

        return call

    def _try_may_have_applied(self, err: errors.StoreError) -> bool:
        return err.maybe_applied

    def _attempt(self, operation: str, call: Callable[..., Any], timeout: float) -> Any:
        world, network, tap = self.world, self.network, self.tap
        assert tap is not None
        apply = call()
        tries = self._local.try_number
        asked = tap.current()
        tap.starting(operation, tries, self._local.call_end)
        tap.sending(operation, tries, float("inf"))
        sent_at = world.now
        fault = network.draw()
        tap.note(asked, tries, fault)
        if fault in ("refused", "throttled"):
            network.travel()
        elif fault == "lost":
            world.block(wake_at=sent_at + timeout)
        elif fault == "late":
            land = lambda: tap.apply(asked, apply, _same)  # noqa: E731
            world.at(network.late(), lambda: tap.land_late(asked, land))
            world.block(wake_at=sent_at + timeout)
        else:
            network.travel()
            result = tap.apply(asked, apply, _same)
            if fault != "answer_lost":
                network.travel()
                return result
            world.block(wake_at=sent_at + timeout)
        error: errors.StoreError
        if fault == "throttled":
            error = errors.Throttled(f"the simulated store throttled {operation}")
        else:
            error = errors.EndpointUnreachable(f"the simulated store: {operation} {fault}")
        # Whether this try may have reached the store; the request layer then sets the call's.
        error.maybe_applied = fault in ("lost", "answer_lost", "late")
        raise error


def _same(result: Any) -> Any:
    return result


def _settled(result: Any) -> Any:
    """A method's answer, read whole within its try (a scan's iterator as a list)."""
    return list(result) if isinstance(result, Iterator) else result
