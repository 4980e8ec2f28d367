"""``--state-file PATH`` on ``acquire`` and ``renew`` (``run``'s is the runner's,
``awsflock.supervise.state_file``): the lock's state (``awsflock.state``) as a file a script
reads at the grant and writes with a renewal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from awsflock import errors
from awsflock.cli import kept
from awsflock.supervise.state_file import StateFile

if TYPE_CHECKING:
    from awsflock.lock.lease import Lease, LockTable
    from awsflock.lock.set_table import LeaseSet


def check(path: str) -> None:
    """UsageError unless ``path`` can be a state file (a regular file, or none yet)."""
    StateFile(path)


def seed_or_give_back(table: LockTable, lease: Lease | LeaseSet, path: str) -> None:
    """Write the state read at the grant to ``path``; if it cannot be written, the lease is
    given back before the error is raised (nobody was told of it yet)."""
    try:
        StateFile(path).seed(getattr(lease, "state", None))
    except errors.AwsflockError:
        kept.give_back(table, lease)
        raise


def write(table: LockTable, lock_id: str, lease_id: str, lease_s: float, path: str) -> Lease:
    """Renew ``lease_id`` on ``lock_id`` for ``lease_s``, writing ``path``'s content as the lock's
    state with the renewal, stamped with this process's clock."""
    from awsflock.lock import kept_state

    data = StateFile(path).read()
    written: Lease = kept_state.write_lease(table, lock_id, lease_id, lease_s, data, table.now_ms())
    return written
