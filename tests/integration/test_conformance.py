"""The conformance suite (tests/conformance/suite.py) on the DynamoDB store over HTTP: moto's
server, dynalite and DynamoDB Local, one table per session, a name prefix per test."""

from __future__ import annotations

import pytest

from awsflock.stores.dynamodb import DynamoDBStore
from tests.conformance.suite import StoreConformance
from tests.servers import Server, local_client


class TestDynamoDBStoreOnServers(StoreConformance):
    @pytest.fixture
    def store(self, server: Server, shared_table: str) -> DynamoDBStore:
        return DynamoDBStore(shared_table, local_client(server.url))
