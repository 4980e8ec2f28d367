"""awsflock: flock(1) for machines that share nothing but an AWS account.

Importing this package creates no AWS client and imports no botocore; the public names below
are loaded on first use, so ``awsflock --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from awsflock.clock import Clock, FakeClock, SystemClock
    from awsflock.errors import (
        AccessDenied,
        AwsflockError,
        Cancelled,
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

_WHERE = {
    "AccessDenied": "errors",
    "AwsflockError": "errors",
    "Cancelled": "errors",
    "Clock": "clock",
    "ConfigurationError": "errors",
    "CredentialsError": "errors",
    "EndpointUnreachable": "errors",
    "FakeClock": "clock",
    "Hold": "heartbeat",
    "Identity": "records",
    "Lease": "lease",
    "LeaseLost": "errors",
    "LockBusy": "errors",
    "LockRecord": "records",
    "LockTable": "lease",
    "NotHeld": "errors",
    "StaleToken": "fencing",
    "StoreError": "errors",
    "SystemClock": "clock",
    "TableIncompatible": "errors",
    "TableMissing": "errors",
    "Throttled": "errors",
    "UsageError": "errors",
    "fenced_update": "fencing",
}

__all__ = [
    "AccessDenied",
    "AwsflockError",
    "Cancelled",
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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'awsflock' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"awsflock.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
