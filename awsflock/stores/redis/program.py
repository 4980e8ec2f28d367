"""The Redis store's step program: each lock step is one call of the step script
(``layout.script()``) on the lock's five keys (and a force-release's audit record's), with
``[op, params as JSON]``; and its reply, read into the shared form (``stores.remote.answers``).

The script's reply: ``[code, now_ms, head, ended]``: ``code`` 1 applied, 0 refused, 2 refused
as barred, -1 refused because the server's clock reads earlier than the lock's last grant
(``head`` then holds that grant's time); ``head`` the lock's hash as a flat
``[field, value, ...]`` list (``p``: the lease, or a lock held shared's group; ``s:N``: a
pool's slot N; ``w:TICKET``: a place in line; ``r:LEASE_ID``: a share; ``slots``, ``next``,
``polled``, ``shared``, ``claim``, ``lapse``); ``ended``: how the step's lease ended. The
``state`` step's reply adds a fifth: ``[state, lease, ms]``, the lock's state as the fence hash
keeps it (each nil: none written), read into ``Answer.state``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Callable

from awsflock import errors
from awsflock.stores.redis import layout
from awsflock.stores.remote.answers import Answer

#: The steps that grant (or extend) a lease: the delayed-restart rule is checked before them.
GRANTS = ("take", "renew", "renew_state")
#: The steps that write nothing: no durability wait follows them.
READS = ("read", "state")
#: The steps whose answer can show the caller a grant, so the server's settings are read again
#: with them: a take's and a renew's, and a fair waiter's join and beat (a take of its that
#: was lost in transit and landed later is learnt from its next poll's answer).
REPORTS_GRANTS = (*GRANTS, "join", "beat")
#: A lease's fields in the script's hash (short, as stored), by the shared form's names.
FIELDS = {
    "lease_id": "lease",
    "expires_ms": "exp",
    "acquired_ms": "acq",
    "lease_ms": "ms",
    "fence": "fence",
    "ended": "ended",
    "history": "hist",
    "forced_by": "fby",
    "forced_reason": "fwhy",
    "forced_ms": "fms",
    "keeper": "keeper",
    "delay_ms": "dl",
    "cap_ms": "cap",
}


@dataclass(frozen=True)
class Request:
    """One step: the script's keys, its op, and its parameters."""

    keys: list[str]
    op: str
    params: dict[str, Any]

    def args(self, touch: bool) -> list[str]:
        """The script's ARGV. ``touch``: the step writes even where it changes nothing, so
        that the durability wait after it has a write to wait for."""
        return [self.op, json.dumps({**self.params, "touch": touch})]


class RedisProgram:
    """Steps under the key prefix ``prefix``; ``where()`` names the server for messages."""

    def __init__(self, prefix: str, where: Callable[[], str]) -> None:
        self.prefix = prefix
        self.where = where

    def request(self, op: str, lock_id: str, params: dict[str, Any]) -> Request:
        keys = list(_keys(self.prefix, lock_id))
        if "who" in params:  # the script keeps an identity as JSON text
            params = {**params, "who": json.dumps(params["who"])}
        if "audit" in params:  # a force-release's audit record, written by the step: KEYS[6]
            audit = params["audit"]
            keys.append(layout.audit_key(self.prefix, lock_id, audit["key"]))
            params = {**params, "audit": json.dumps(audit["entry"])}
        return Request(keys, op, params)

    def request_all(self, op: str, steps: list[tuple[str, dict[str, Any]]]) -> Request:
        keys = [key for lock_id, _ in steps for key in _keys(self.prefix, lock_id)]
        each = [self.request(op, lock_id, params).params for lock_id, params in steps]
        return Request(keys, op, {"steps": each})

    def answer_all(self, reply: Any, lock_ids: list[str]) -> list[Answer]:
        found = reply[2]
        if len(found) != len(lock_ids):
            raise ValueError(f"{len(found)} answers to a set's step of {len(lock_ids)} locks")
        return [self.answer(one, lock_id) for one, lock_id in zip(found, lock_ids)]

    def answer(self, reply: Any, lock_id: str) -> Answer:
        code, now = int(reply[0]), int(reply[1])
        if code < 0:
            behind = int(reply[2]) - now
            raise errors.Throttled(
                f"{self.where()}: the server's clock reads {behind} ms earlier than the last "
                f"grant on {lock_id!r} (it was stepped back); no grant until it catches up",
                hint="check the server's time synchronisation (NTP); retry",
            )
        ended = None
        if len(reply) > 3 and reply[3] is not None:
            ended = reply[3].decode() if isinstance(reply[3], bytes) else str(reply[3])
        state = _state(reply[4]) if len(reply) > 4 else None
        return Answer(code == 1, now, head(fields(reply[2])), code == 2, ended, state)


@functools.lru_cache(maxsize=1024)
def _keys(prefix: str, lock_id: str) -> tuple[str, ...]:
    """A lock's five keys, in the script's order (remembered: every step names them)."""
    return (
        layout.lock_key(prefix, lock_id),
        layout.fence_key(prefix, lock_id),
        layout.bars_key(prefix, lock_id),
        layout.done_key(prefix, lock_id),
        layout.forced_key(prefix, lock_id),
    )


def _state(found: list[Any]) -> dict[str, Any]:
    """The ``state`` step's ``[state, lease, ms]`` in the shared form (data None: none)."""
    data, lease_id, ms = (x.decode() if isinstance(x, bytes) else x for x in found)
    return {"data": data, "lease": lease_id or "", "ms": int(ms or 0)}


def fields(flat: list[Any]) -> dict[str, str]:
    """A flat [field, value, ...] reply as a dict of text."""
    text = [x.decode() if isinstance(x, bytes) else str(x) for x in flat]
    return dict(zip(text[::2], text[1::2]))


def lease(text: str | None) -> dict[str, Any] | None:
    """A lease as the script keeps it (JSON text), in the shared form."""
    if not text:
        return None
    kept: dict[str, Any] = json.loads(text)
    found = {name: kept.get(short) for name, short in FIELDS.items()}
    found["who"] = _who(kept.get("who"))
    prev = kept.get("prev")
    if isinstance(prev, dict):  # the lease its grant took over ({}: none)
        found["prev"] = _replaced(prev)
    found["raw"] = kept
    return found


def _replaced(prev: dict[str, Any]) -> dict[str, Any]:
    """A lease as a grant's ``prev`` or a group's ``lapse`` keeps it (short names), in the
    shared form: a group's with its shares and its lapse as they stood ({}: none)."""
    found = {name: prev[short] for name, short in FIELDS.items() if short in prev}
    if prev:
        found["who"] = _who(prev.get("who"))
    if prev.get("shared"):
        kept = prev.get("shares")  # {} (cjson may write an empty one as [])
        found["shared"] = True
        found["shares"] = {k: _share(v) for k, v in kept.items()} if isinstance(kept, dict) else {}
        if isinstance(prev.get("lapse"), dict):
            found["lapse"] = _replaced(prev["lapse"])
    return found


def _share(share: dict[str, Any]) -> dict[str, Any]:
    """A share as the script keeps it, in the shared form (its holder as a dict)."""
    return {**share, "who": _who(share.get("who"))}


def head(hash_: dict[str, str]) -> dict[str, Any] | None:
    """A lock's hash as the shared form's head (None: no lock)."""
    if not hash_:
        return None
    places, shares = {}, {}
    for name, value in hash_.items():
        if name.startswith("w:"):
            place = json.loads(value)
            places[name[2:]] = {**place, "who": _who(place.get("who"))}
        elif name.startswith("r:"):
            shares[name[2:]] = _share(json.loads(value))
    top = lease(hash_.get("p"))
    if top is not None and hash_.get("lapse"):  # a group's first share ended unreleased
        top["lapse"] = _replaced(json.loads(hash_["lapse"]))
    return {
        "lease": top,
        "slots": hash_.get("slots") or None,
        "next_number": hash_.get("next"),
        "polled_ms": hash_.get("polled") or None,
        "line": places,
        "slot_leases": {
            int(name[2:]): lease(value) for name, value in hash_.items() if name.startswith("s:")
        },
        "shared": "shared" in hash_,
        "shares": shares,
        "claim_ms": hash_.get("claim") or None,
    }


def _who(text: Any) -> dict[str, Any]:
    """An identity kept as JSON text, as a dict ({} where it is not one)."""
    try:
        who = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {}
    return who if isinstance(who, dict) else {}
