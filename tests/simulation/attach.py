"""Each simulated process's own store: the real store of the run's kind, on the same table as
the one the checker reads (``inner``), in the process's clock, with its faults beneath its
request code (``network``), seen through a ``Tap``."""

from __future__ import annotations

import copy
from typing import Any

from tests.simulation.network import Network, Tap
from tests.simulation.world import Proc


class Attach:
    """Opens the processes' stores of one simulation; ``close`` ends what they share."""

    def __init__(self, inner: Any, network: Network, watcher: Any) -> None:
        self.inner = inner
        self.network = network
        self.watcher = watcher
        self.kind = getattr(inner, "kind", "memory")
        self._conns: Any = None
        if self.kind in ("postgresql", "redis"):
            from tests.simulation.links import RealConns

            self._conns = RealConns(inner.link, inner.request_timeout)

    def store(self, proc: Proc) -> Tap:
        if self.kind in ("postgresql", "redis"):
            return self._server(proc)
        if self.kind == "dynamodb":
            return self._dynamodb(proc)
        return self._memory(proc)

    def close(self) -> None:
        if self._conns is not None:
            self._conns.close()

    def _memory(self, proc: Proc) -> Tap:
        from tests.simulation.memory import FaultyMemory

        faulty = FaultyMemory(self.inner, self.network, proc)
        faulty.tap = Tap(faulty, self.network.world, proc, self.watcher)
        return faulty.tap

    def _server(self, proc: Proc) -> Tap:
        """The real PostgreSQL or Redis store on the same table (a copy of ``inner`` with a
        connection of its own), its link a ``FaultyLink``, its tries in virtual time."""
        from tests.simulation.links import FaultyLink, SimTime

        store = copy.copy(self.inner)
        store._connected_init()
        store.clock = proc.clock
        store._retry_rng = self.network.world.rng  # backoff jitter from the seeded source
        tap = Tap(store, self.network.world, proc, self.watcher)
        store.link = FaultyLink(self.inner.link, self._conns, self.network, tap, self.kind)
        store.try_time = SimTime(store, store.link, proc, self.network)
        return tap

    def _dynamodb(self, proc: Proc) -> Tap:
        """The real DynamoDB store on the same table, its client a ``FaultyClient`` over
        moto's, its request threads ``SimWorkers``."""
        from tests.simulation.boto import FaultyClient, SimWorkers
        from tests.simulation.legacy import DynamoDBStoreWith020

        raw = self.inner.client
        wrapper = DynamoDBStoreWith020(self.inner.table_name, raw, clock=proc.clock)
        tap = Tap(wrapper, self.network.world, proc, self.watcher)
        client = FaultyClient(raw, self.network, tap, self.inner)
        wrapper.client = client
        store = wrapper.store
        store._client = client
        store._workers = SimWorkers(client, proc, self.network)
        store._retry_rng = self.network.world.rng
        return tap
