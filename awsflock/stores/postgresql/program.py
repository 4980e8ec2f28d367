"""The PostgreSQL store's step program: each lock step is one call of the table's step function
(``schema.STEP``: ``step(op, lock_id, params jsonb) -> jsonb``), and its answer, read into the
shared form (``stores.remote.answers``).

The function's answer: ``{"applied", "now", "barred", "ended", "rows"}``, where ``rows`` are
the lock's rows as JSON: its head row (``slot`` -1: the lock's lease, its line, a pool's size)
and a pool's slot rows (``slot`` 0..n-1), without the lock's state. The step ``state`` answers
the state alone (``"state"``: ``{"data", "lease", "ms"}`` or null), read from the head row's
columns ``state``, ``state_lease`` and ``state_ms``.
"""

from __future__ import annotations

import json
from typing import Any

from awsflock.stores.postgresql import schema
from awsflock.stores.remote.answers import Answer

#: The lease fields of a row, as the shared form names them (the same names).
LEASE_FIELDS = (
    "lease_id",
    "expires_ms",
    "acquired_ms",
    "lease_ms",
    "fence",
    "ended",
    "history",
    "forced_by",
    "forced_reason",
    "forced_ms",
    "keeper",
    "who",
    "prev",
    "lapse",
    "delay_ms",
    "cap_ms",
)


class PgProgram:
    """Steps on the lock table ``table``."""

    def __init__(self, table: str) -> None:
        self.query = f"SELECT {schema.quote(schema.function_name(table))}(%s, %s, %s::jsonb)"

    def request(self, op: str, lock_id: str, params: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
        return self.query, (op, lock_id, json.dumps(params))

    def answer(self, reply: Any, lock_id: str) -> Answer:
        return Answer(
            applied=bool(reply["applied"]),
            now_ms=int(reply["now"]),
            head=head(reply["rows"]),
            barred=bool(reply.get("barred")),
            ended=None if reply.get("ended") is None else str(reply["ended"]),
            state=reply.get("state"),
        )

    def request_all(
        self, op: str, steps: list[tuple[str, dict[str, Any]]]
    ) -> tuple[str, tuple[Any, ...]]:
        params = {"steps": [{"lock": lock_id, "p": p} for lock_id, p in steps]}
        return self.query, (op, "", json.dumps(params))

    def answer_all(self, reply: Any, lock_ids: list[str]) -> list[Answer]:
        found = reply["answers"]
        if len(found) != len(lock_ids):
            raise ValueError(f"{len(found)} answers to a set's step of {len(lock_ids)} locks")
        return [self.answer(one, lock_id) for one, lock_id in zip(found, lock_ids)]


def lease(row: dict[str, Any]) -> dict[str, Any]:
    """A row's lease in the shared form."""
    found = {name: row.get(name) for name in LEASE_FIELDS}
    found["raw"] = row
    return found


def head(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A lock's rows as the shared form's head (None: no lock)."""
    top = next((r for r in rows if r["slot"] == -1), None)
    if top is None or (len(rows) == 1 and _empty(top)):
        return None  # a row of barred ids only (an end step's) is no lock
    return {
        "lease": lease(top),
        "slots": top.get("slots"),
        "next_number": top.get("next_number"),
        "polled_ms": top.get("polled_ms"),
        "line": top.get("line") or {},
        "shared": top.get("shared"),
        "shares": top.get("shares") or {},
        "claim_ms": top.get("claim_ms"),
        "slot_leases": {int(r["slot"]): lease(r) for r in rows if r["slot"] >= 0},
    }


def _empty(top: dict[str, Any]) -> bool:
    """A lock's row that never held a lease, is no pool and has nobody in line."""
    return top.get("lease_id") is None and top.get("slots") is None and not top.get("line")
