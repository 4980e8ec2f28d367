"""The conformance suite (tests/conformance/suite.py) on the in-memory store and on the DynamoDB
store over in-process moto. The DynamoDB servers run it in tests/integration/."""

from __future__ import annotations

import pytest

from awsflock.stores.dynamodb import DynamoDBStore
from awsflock.stores.memory import MemoryStore
from tests.conformance.suite import StoreConformance


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


class TestDynamoDBStoreOnMoto(StoreConformance):
    @pytest.fixture
    def store(self, moto: object) -> DynamoDBStore:
        return DynamoDBStore("awsflock", moto)  # type: ignore[arg-type]
