"""The conformance suite (tests/conformance/suite.py) on the DynamoDB store over HTTP: moto's
server, dynalite and DynamoDB Local, one table per session, a name prefix per test; and the
PostgreSQL store on a real PostgreSQL server; each also as ``awsflock.aio`` awaits it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from awsflock.stores import kinds
from awsflock.stores.dynamodb import DynamoDBStore
from awsflock.stores.postgresql import PostgresStore
from tests.conformance.awaited import Awaited
from tests.conformance.delay import DelayConformance
from tests.conformance.max_hold import MaxHoldConformance
from tests.conformance.previous import PreviousConformance
from tests.conformance.sets import SetConformance
from tests.conformance.shares import ShareConformance
from tests.conformance.state import StateConformance
from tests.conformance.suite import StoreConformance
from tests.servers import PATIENT, PostgresServer, Server, local_client


@pytest.mark.needs("dynamodb_api", "the DynamoDB store itself, on each DynamoDB server")
class TestDynamoDBStoreOnServers(StoreConformance):
    @pytest.fixture
    def store(self, server: Server, shared_table: str) -> DynamoDBStore:
        return DynamoDBStore(shared_table, local_client(server.url), request_timeout=PATIENT)


@pytest.mark.needs("dynamodb_api", "the DynamoDB store itself, on each DynamoDB server")
class TestDynamoDBStoreOnServersSets(SetConformance):
    @pytest.fixture
    def store(self, server: Server, shared_table: str) -> DynamoDBStore:
        return DynamoDBStore(shared_table, local_client(server.url), request_timeout=PATIENT)


@pytest.mark.needs("dynamodb_api", "the DynamoDB store itself, on each DynamoDB server")
class TestDynamoDBStoreOnServersShares(ShareConformance):
    @pytest.fixture
    def store(self, server: Server, shared_table: str) -> DynamoDBStore:
        return DynamoDBStore(shared_table, local_client(server.url), request_timeout=PATIENT)


@pytest.mark.needs("dynamodb_api", "the DynamoDB store itself, on each DynamoDB server")
class TestDynamoDBStoreOnServersPrevious(PreviousConformance):
    @pytest.fixture
    def store(self, server: Server, shared_table: str) -> DynamoDBStore:
        return DynamoDBStore(shared_table, local_client(server.url), request_timeout=PATIENT)


@pytest.mark.needs("dynamodb_api", "the DynamoDB store itself, on each DynamoDB server")
class TestDynamoDBStoreOnServersDelay(DelayConformance):
    """Lock-delay on each server: its update arithmetic (``SET a = :v + if_not_exists(#b,
    :zero)``, ``if_not_exists(#k, :ttl) + if_not_exists(#d, :zero)``) is accepted there."""

    @pytest.fixture
    def store(self, server: Server, shared_table: str) -> DynamoDBStore:
        return DynamoDBStore(shared_table, local_client(server.url), request_timeout=PATIENT)


class TestPostgresStore(StoreConformance):
    """On a real PostgreSQL server, in the caller's time (the suite moves its clock by hand);
    the server's own clock is tested in test_postgres.py."""

    bars = True

    @pytest.fixture
    def store(self, postgres: PostgresServer, pg_table: str) -> Iterator[PostgresStore]:
        store = PostgresStore(postgres.url, pg_table, server_time=False)
        yield store
        store.close()


class TestPostgresStoreSets(SetConformance):
    """Sets on a real PostgreSQL server, in the caller's time; ``bars`` as above."""

    bars = True

    @pytest.fixture
    def store(self, postgres: PostgresServer, pg_table: str) -> Iterator[PostgresStore]:
        store = PostgresStore(postgres.url, pg_table, server_time=False)
        yield store
        store.close()


class TestPostgresStorePrevious(PreviousConformance):
    """How the lease before each grant ended, on a real PostgreSQL server, in the caller's
    time."""

    @pytest.fixture
    def store(self, postgres: PostgresServer, pg_table: str) -> Iterator[PostgresStore]:
        store = PostgresStore(postgres.url, pg_table, server_time=False)
        yield store
        store.close()


class TestPostgresStoreDelay(DelayConformance):
    """Lock-delay on a real PostgreSQL server, in the caller's time (the server's clock:
    test_postgres.py)."""

    @pytest.fixture
    def store(self, postgres: PostgresServer, pg_table: str) -> Iterator[PostgresStore]:
        store = PostgresStore(postgres.url, pg_table, server_time=False)
        yield store
        store.close()


@pytest.mark.needs("dynamodb_api", "the DynamoDB store itself, on each DynamoDB server")
class TestDynamoDBStoreOnServersMaxHold(MaxHoldConformance):
    """Max-hold on each server: its renewal's condition on the cap."""

    @pytest.fixture
    def store(self, server: Server, shared_table: str) -> DynamoDBStore:
        return DynamoDBStore(shared_table, local_client(server.url), request_timeout=PATIENT)


class TestPostgresStoreMaxHold(MaxHoldConformance):
    """Max-hold on a real PostgreSQL server, in the caller's time."""

    @pytest.fixture
    def store(self, postgres: PostgresServer, pg_table: str) -> Iterator[PostgresStore]:
        store = PostgresStore(postgres.url, pg_table, server_time=False)
        yield store
        store.close()


class TestPostgresStoreState(StateConformance):
    """State with the lease on a real PostgreSQL server, in the caller's time."""

    @pytest.fixture
    def store(self, postgres: PostgresServer, pg_table: str) -> Iterator[PostgresStore]:
        store = PostgresStore(postgres.url, pg_table, server_time=False)
        yield store
        store.close()


class TestPostgresStoreShares(ShareConformance):
    """Shared holders on a real PostgreSQL server, in the caller's time."""

    @pytest.fixture
    def store(self, postgres: PostgresServer, pg_table: str) -> Iterator[PostgresStore]:
        store = PostgresStore(postgres.url, pg_table, server_time=False)
        yield store
        store.close()


@pytest.mark.needs("dynamodb_api", "the DynamoDB store itself, on each DynamoDB server")
class TestDynamoDBStoreOnServersAwaited(StoreConformance):
    """As ``awsflock.aio`` awaits it (tests/conformance/awaited.py)."""

    @pytest.fixture
    def store(self, server: Server, shared_table: str) -> Iterator[Any]:
        awaited = kinds.awaited(
            DynamoDBStore(shared_table, local_client(server.url), request_timeout=PATIENT)
        )
        adapter = Awaited(awaited)
        yield adapter
        adapter.close()


class TestPostgresStoreAwaited(StoreConformance):
    """As ``awsflock.aio`` awaits it (tests/conformance/awaited.py)."""

    bars = True

    @pytest.fixture
    def store(self, postgres: PostgresServer, pg_table: str) -> Iterator[Any]:
        awaited = kinds.awaited(PostgresStore(postgres.url, pg_table, server_time=False))
        adapter = Awaited(awaited)
        yield adapter
        adapter.close()


@pytest.mark.needs("dynamodb_api", "the DynamoDB store itself, on each DynamoDB server")
class TestDynamoDBStoreOnServersState(StateConformance):
    """State with the lease on each server: its transaction with the fence record, or the
    lock's item where the server has no transactions (dynalite)."""

    @pytest.fixture
    def store(self, server: Server, shared_table: str) -> DynamoDBStore:
        return DynamoDBStore(shared_table, local_client(server.url), request_timeout=PATIENT)
