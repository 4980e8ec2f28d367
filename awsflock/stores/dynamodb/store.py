"""A lock table in DynamoDB: the ``LockStore`` whose every step is one conditional write (a plain
take: one transaction of the lock's item and its fence record).

With ``items`` (the item layout), ``expressions`` (the conditions), ``translate`` (errors),
``client`` and ``tables`` (table administration), this sub-package is the only code that speaks
DynamoDB. A failed write learns the item's state from the same request
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``), or from one consistent read where the
endpoint ignores that parameter.

Each call is retried (botocore makes one try), with jittered backoff, within the caller's
budget; each try runs in a worker thread bounded in real time, so an answer that trickles in
cannot outlast the budget (``base``).
"""

from __future__ import annotations

from awsflock.protocol import Attempt, Outcome
from awsflock.shares import is_share_id
from awsflock.stores import kinds
from awsflock.stores.dynamodb.base import TableBase, expiration_seconds, new_version
from awsflock.stores.dynamodb.shares import Shares

__all__ = ["DynamoDBStore", "TableBase", "expiration_seconds", "new_version"]


class DynamoDBStore(Shares):
    """A lock table in DynamoDB (a ``LockStore``). Builds its botocore client on first use.
    The layers: ``base`` (client, requests, errors, reads), ``writes`` (the conditional
    writes), ``takes``, ``ends`` (release, force-release), ``steps`` (the others), ``sets``
    (several names in one step) and ``shares`` (shared holders)."""

    kind = "dynamodb"
    skew_free = kinds.get("dynamodb").skew_free

    @property
    def transactions(self) -> bool:
        """Whether the endpoint runs transactions, as far as the store knows: True until one
        answers that it does not (dynalite). Without them a plain lock's record is kept for good
        as its fence, and no lease it ended is kept apart (the kind's transactions "varies")."""
        return self._transactions

    def take(self, lock_id: str, attempt: Attempt) -> Outcome:
        """Take the lock (or the attempt's slot of its pool) if it is free (see ``LockStore``).
        One step of up to five calls: a doubt from any of them stays with the answer."""
        with self.step():
            if is_share_id(attempt.lease_id):
                return self._take_share(lock_id, attempt)
            return self._take(lock_id, attempt)
