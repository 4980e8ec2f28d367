"""awsflock: flock(1) for machines that share nothing but an AWS account.

Importing this package creates no AWS client and imports no botocore; the store builds its
client on the first request.
"""

from __future__ import annotations

from awsflock.clock import Clock, FakeClock, SystemClock
from awsflock.errors import (
    AccessDenied,
    AwsflockError,
    ConfigurationError,
    CredentialsError,
    EndpointUnreachable,
    LeaseLost,
    LockBusy,
    NotHeld,
    StoreError,
    TableIncompatible,
    TableMissing,
    Throttled,
    UsageError,
)
from awsflock.fencing import StaleToken, fenced_update
from awsflock.heartbeat import Hold
from awsflock.lease import Lease, LockTable
from awsflock.records import Identity, LockRecord

__all__ = [
    "AccessDenied",
    "AwsflockError",
    "Clock",
    "ConfigurationError",
    "CredentialsError",
    "EndpointUnreachable",
    "FakeClock",
    "Hold",
    "Identity",
    "Lease",
    "LeaseLost",
    "LockBusy",
    "LockRecord",
    "LockTable",
    "NotHeld",
    "StaleToken",
    "StoreError",
    "SystemClock",
    "TableIncompatible",
    "TableMissing",
    "Throttled",
    "UsageError",
    "fenced_update",
]
