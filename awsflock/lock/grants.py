"""What an acquisition hands out: its LEASE_IDs (``new_lease_id``), the grant it returns
(``Grant``), and the fields of the log events about a lease (``event_fields``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from awsflock.names import slot_of
from awsflock.records import LockRecord
from awsflock.state import LockState


def event_fields(name: str, lock_id: str, record: LockRecord | None) -> dict[str, Any]:
    """Fields of a log event (the JSON format drops lease_id unless at debug level)."""
    data: dict[str, Any] = {"event": name, "lock_id": lock_id}
    if record is not None:
        data["owner"] = record.owner
        data["fencing_token"] = record.fencing_token
        data["lease_id"] = record.lease_id
        if slot_of(record.lease_id) is not None:
            data["slot"] = slot_of(record.lease_id)
    return data


def new_lease_id() -> str:
    """An unguessable LEASE_ID: uuid4 takes its 122 random bits from os.urandom."""
    return str(uuid.uuid4())


@dataclass(frozen=True)
class Grant:
    """A lease an acquisition holds: its LEASE_ID and the record as the store wrote it.
    ``to_mono`` turns the record's times into the clock's monotonic time (see
    ``Outcome.to_mono``; None: not known)."""

    lease_id: str
    record: LockRecord
    slot: int | None
    attempts: int
    waited: float
    to_mono: float | None = None
    #: The caller was told it waits for the lock: the grant is said as loudly.
    contended: bool = False
    #: Seconds from the last answer that did not grant to this grant's (None: the first try
    #: granted): how long the hand-off took at most, as this waiter saw it.
    handoff: float | None = None
    #: The lock's state, read right after the grant where it was asked for (``state=True``).
    state: LockState | None = None
