"""awsflock: flock(1) for machines that share nothing but an AWS account, a PostgreSQL
database or another store (``awsflock.stores.kinds``).

Importing this package creates no client and imports no driver (botocore, psycopg, redis); the
public names below are loaded on first use, so ``awsflock --help`` stays fast. ``__version__``
is read from the installed package's metadata on first use. The library never prints: its
loggers (``awsflock.*``) have a ``NullHandler``, and what reaches stderr is the application's
choice (the CLI's is ``awsflock.cli.logs``). The layers: ``protocol``
and ``records`` (the store contract and the types), ``stores``, ``lock`` (the lock logic),
``supervise`` (``run`` and the keep-alive renewer), ``cli``.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

# A library does not print: without the application's own handlers, its warnings go nowhere
# rather than to logging's last resort (stderr).
logging.getLogger(__name__).addHandler(logging.NullHandler())

if TYPE_CHECKING:
    __version__: str
    from awsflock.clock import Clock, FakeClock, SystemClock
    from awsflock.errors import (
        AccessDenied,
        AwsflockError,
        Cancelled,
        ConfigurationError,
        CredentialsError,
        EndpointUnreachable,
        HoldCapped,
        LeaseLost,
        LockBusy,
        NotHeld,
        StateRefused,
        StoreError,
        TableIncompatible,
        TableMissing,
        Throttled,
        UsageError,
    )
    from awsflock.lock.connect import connect
    from awsflock.lock.heartbeat import Hold
    from awsflock.lock.lease import Lease, LockTable
    from awsflock.lock.set_table import LeaseSet
    from awsflock.protocol import Attempt, LockStore, Outcome
    from awsflock.records import Identity, Line, LockRecord, Pool, Waiter
    from awsflock.stores.dynamodb import DynamoDBStore
    from awsflock.stores.dynamodb.fencing import StaleToken, fenced_update
    from awsflock.stores.memory import MemoryStore
    from awsflock.stores.postgresql import PostgresStore
    from awsflock.stores.redis import RedisStore

_WHERE = {
    "AccessDenied": "errors",
    "AwsflockError": "errors",
    "Cancelled": "errors",
    "Clock": "clock",
    "Attempt": "protocol",
    "ConfigurationError": "errors",
    "CredentialsError": "errors",
    "DynamoDBStore": "stores.dynamodb",
    "EndpointUnreachable": "errors",
    "FakeClock": "clock",
    "Hold": "lock.heartbeat",
    "HoldCapped": "errors",
    "StateRefused": "errors",
    "Identity": "records",
    "Lease": "lock.lease",
    "LeaseLost": "errors",
    "LeaseSet": "lock.set_table",
    "LockBusy": "errors",
    "Line": "records",
    "LockRecord": "records",
    "LockStore": "protocol",
    "LockTable": "lock.lease",
    "MemoryStore": "stores.memory",
    "NotHeld": "errors",
    "Outcome": "protocol",
    "Pool": "records",
    "PostgresStore": "stores.postgresql",
    "RedisStore": "stores.redis",
    "Waiter": "records",
    "StaleToken": "stores.dynamodb.fencing",
    "StoreError": "errors",
    "SystemClock": "clock",
    "TableIncompatible": "errors",
    "TableMissing": "errors",
    "Throttled": "errors",
    "UsageError": "errors",
    "connect": "lock.connect",
    "fenced_update": "stores.dynamodb.fencing",
}

__all__ = [
    "AccessDenied",
    "Attempt",
    "AwsflockError",
    "Cancelled",
    "Clock",
    "ConfigurationError",
    "CredentialsError",
    "DynamoDBStore",
    "EndpointUnreachable",
    "FakeClock",
    "Hold",
    "HoldCapped",
    "Identity",
    "Lease",
    "LeaseLost",
    "LeaseSet",
    "Line",
    "LockBusy",
    "LockRecord",
    "LockStore",
    "LockTable",
    "MemoryStore",
    "NotHeld",
    "Outcome",
    "Pool",
    "PostgresStore",
    "RedisStore",
    "StaleToken",
    "StateRefused",
    "StoreError",
    "SystemClock",
    "TableIncompatible",
    "TableMissing",
    "Throttled",
    "UsageError",
    "Waiter",
    "connect",
    "fenced_update",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()[name] = _version()
        return globals()[name]
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'awsflock' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"awsflock.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE) | {"__version__"})


def _version() -> str:
    """The installed package's version (what ``awsflock --version`` says)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(__name__)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"
