"""The conformance suite (tests/conformance/suite.py) on the in-memory store and on the DynamoDB
store over in-process moto; the in-memory store also as ``awsflock.aio`` awaits it
(tests/conformance/awaited.py). The servers run it, both ways, in tests/integration/."""

from __future__ import annotations

from typing import Any

import pytest

from awsflock.stores import kinds
from awsflock.stores.dynamodb import DynamoDBStore
from awsflock.stores.memory import MemoryStore
from tests.conformance.awaited import Awaited
from tests.conformance.delay import DelayConformance
from tests.conformance.max_hold import MaxHoldConformance
from tests.conformance.previous import PreviousConformance
from tests.conformance.sets import SetConformance
from tests.conformance.shares import ShareConformance
from tests.conformance.state import StateConformance
from tests.conformance.suite import StoreConformance


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


class TestDynamoDBStoreOnMoto(StoreConformance):
    # In-process moto applies concurrent requests without a lock (as its threaded server does,
    # pinned in tests/integration/test_cli_servers.py): 8 concurrent takes of one free lock were
    # granted more than once in each of 7 runs on 2026-11-23. Not a store to test atomicity on.
    concurrent_skip = "in-process moto is not atomic under concurrent requests"

    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return DynamoDBStore("awsflock", moto)  # type: ignore[arg-type]


class TestMemoryStoreAwaited(StoreConformance):
    """The in-memory store as ``awsflock.aio`` awaits it."""

    @pytest.fixture
    def store(self) -> Any:
        adapter = Awaited(kinds.awaited(MemoryStore()))
        yield adapter
        adapter.close()


class TestMemoryStoreSets(SetConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


class TestDynamoDBStoreOnMotoSets(SetConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return DynamoDBStore("awsflock", moto)  # type: ignore[arg-type]


class TestMemoryStoreWithoutTransactionsSets(SetConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore(transactions=False)


class TestMemoryStoreShares(ShareConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


class TestMemoryStoreWithoutTransactionsShares(ShareConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore(transactions=False)


class TestDynamoDBStoreOnMotoShares(ShareConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return DynamoDBStore("awsflock", moto)  # type: ignore[arg-type]


class TestMemoryStorePrevious(PreviousConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


class TestMemoryStoreWithoutTransactionsPrevious(PreviousConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore(transactions=False)


class TestDynamoDBStoreOnMotoPrevious(PreviousConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return DynamoDBStore("awsflock", moto)  # type: ignore[arg-type]


def _without_transactions(moto: object) -> DynamoDBStore:
    """The DynamoDB store as on an endpoint without TransactWriteItems (dynalite), which it
    learns at its first take: its items are kept for good, and each step is one write."""
    store = DynamoDBStore("awsflock", moto)  # type: ignore[arg-type]
    store._transactions = False
    return store


class TestDynamoDBStoreOnMotoWithoutTransactionsShares(ShareConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return _without_transactions(moto)


class TestDynamoDBStoreOnMotoWithoutTransactionsPrevious(PreviousConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return _without_transactions(moto)


class TestMemoryStoreDelay(DelayConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


class TestMemoryStoreWithoutTransactionsDelay(DelayConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore(transactions=False)


class TestDynamoDBStoreOnMotoDelay(DelayConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return DynamoDBStore("awsflock", moto)  # type: ignore[arg-type]


class TestDynamoDBStoreOnMotoWithoutTransactionsDelay(DelayConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return _without_transactions(moto)


class TestMemoryStoreMaxHold(MaxHoldConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


class TestDynamoDBStoreOnMotoMaxHold(MaxHoldConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return DynamoDBStore("awsflock", moto)  # type: ignore[arg-type]


class TestDynamoDBStoreOnMotoWithoutTransactionsMaxHold(MaxHoldConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return _without_transactions(moto)


class TestMemoryStoreState(StateConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


class TestDynamoDBStoreOnMotoState(StateConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return DynamoDBStore("awsflock", moto)  # type: ignore[arg-type]


class TestDynamoDBStoreOnMotoWithoutTransactionsState(StateConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return _without_transactions(moto)
