"""The one exception tree of awsflock. Every class knows the CLI exit code it maps to.

::

    AwsflockError (exit 1)
    ├── UsageError (exit 2)                 bad durations, lock names, lease ids, options
    ├── LockBusy (exit 3)                   held by someone else; carries the holder
    ├── NotHeld (exit 3)                    renew/release of a lease that is no longer ours
    │   └── LeaseLost                       a held lease was lost while in use
    ├── Cancelled (exit 130)                the caller asked to stop waiting (a signal)
    ├── ConfigurationError (exit 1)         no region, bad profile, slot-count disagreement
    └── StoreError (exit 1)                 the store said no or could not be reached
        ├── TableMissing
        ├── TableIncompatible
        ├── CredentialsError
        ├── AccessDenied
        ├── EndpointUnreachable
        └── Throttled

A store raises only these: each backend translates its driver's exceptions in exactly one
place (``awsflock.stores.dynamodb.translate`` for botocore's,
``awsflock.stores.postgresql.translate`` for psycopg's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from awsflock.records import LockRecord


class AwsflockError(Exception):
    """Root of every error awsflock raises."""

    exit_code = 1
    #: For a failed request: whether it may still have been applied (its answer was lost).
    maybe_applied = False

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and the fix, on one line, as the CLI prints it."""
        return f"{self.message}: {self.hint}" if self.hint else self.message


class UsageError(AwsflockError):
    """The caller asked for something that cannot be done as asked."""

    exit_code = 2


class LockBusy(AwsflockError):
    """The lock is held by another lease; ``holder`` describes it when known."""

    exit_code = 3

    def __init__(self, message: str, *, holder: LockRecord | None = None, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.holder = holder


class NotHeld(AwsflockError):
    """The lease given is not the current holder (released, expired and taken, or unknown)."""

    exit_code = 3
    #: Why, as a lease-lost metric's reason (awsflock.metrics): "force_released", "expired",
    #: or "renewal_refused" (any other refusal).
    reason = "renewal_refused"


class LeaseLost(NotHeld):
    """A lease held by this process was lost (renewal refused or impossible in time)."""


class HoldCapped(LeaseLost):
    """A hold reached its max-hold (``max_hold=``, ``--max-hold``): no renewal extends it."""


class StateRefused(AwsflockError):
    """A state write of a lease we hold was refused: a later write of the same lease (another
    process writing under its LEASE_ID, or a clock stepped back) is stored. The lease stays
    held."""


class Cancelled(AwsflockError):
    """An acquire was asked to stop (its ``cancel`` event was set); nothing is left held."""

    exit_code = 130


class ConfigurationError(AwsflockError):
    """Region, profile, credentials set-up or pool size is wrong."""


class StoreError(AwsflockError):
    """DynamoDB refused the request or could not be reached."""


class TableMissing(StoreError):
    """The lock table does not exist."""


class TableIncompatible(StoreError):
    """A table of that name exists but does not have awsflock's key schema."""


class CredentialsError(StoreError):
    """No usable AWS credentials were found."""


class AccessDenied(StoreError):
    """IAM refused the request; the message names the action."""


class EndpointUnreachable(StoreError):
    """The DynamoDB endpoint could not be reached or did not answer in time."""


class Throttled(StoreError):
    """DynamoDB kept throttling after botocore's retries."""
