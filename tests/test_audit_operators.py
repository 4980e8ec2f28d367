"""Two operators force-releasing the same lease (h13's adversarial review of the audit rule):
the audit log names the operator whose force-release ended the lease, and keeps its record,
whatever the other one does. On in-process moto and the in-memory store; the same scenarios
run on every real server in tests/integration/test_audit_operators.py.

The scenario: operator Yan is shown the lease (``confirm``, as at a terminal prompt); while he
reads it, operator Xia force-releases that lease, and the lock is taken again (``hand_offs``
times: acquired, and released but the last). Then Yan says yes.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from awsflock import errors
from awsflock.lock.admin import force_release
from awsflock.lock.audit_log import audit_records
from awsflock.records import Identity
from awsflock.supervise.keepalive import _end as _keepalive_end

XIA = ("xia", "xia's reason")


def meanwhile(
    make: Callable[..., Any], lock: str, lease_id: str, hand_offs: int
) -> Callable[[Any], bool]:
    """Yan's confirmation, given only after Xia's force-release and ``hand_offs`` new leases."""

    def confirm(_record: Any) -> bool:
        force_release(make("x"), lock, reason=XIA[1], lease_id=lease_id, actor=XIA[0])
        for n in range(hand_offs):
            held = make(f"w{n}").acquire(lock, lease=600, wait=0)
            if n < hand_offs - 1:
                held.release()
        return True

    return confirm


def run_yan(make: Callable[..., Any], lock: str, hand_offs: int) -> tuple[str, str]:
    """The scenario; (the lease Xia ended, what Yan was told)."""
    lease = make("a").acquire(lock, lease=600, wait=0)
    confirm = meanwhile(make, lock, lease.lease_id, hand_offs)
    with pytest.raises(errors.NotHeld) as told:
        force_release(make("y"), lock, reason="yan's reason", actor="yan", confirm=confirm)
    return lease.lease_id, str(told.value)


def shown(make: Callable[..., Any], lock: str) -> list[tuple[Any, ...]]:
    return [(r["lease_id"], r["actor"], r["reason"]) for r in audit_records(make("op"), lock)]


def test_the_audit_names_the_operator_whose_force_ended_a_lease_since_taken_again(
    make_any_table,
):
    lease_id, _told = run_yan(make_any_table, "two-ops", hand_offs=1)
    assert shown(make_any_table, "two-ops") == [(lease_id, *XIA)]


def test_a_force_release_keeps_its_record_when_another_operators_is_refused_much_later(
    make_any_table,
):
    lease_id, _told = run_yan(make_any_table, "two-ops-late", hand_offs=6)
    assert shown(make_any_table, "two-ops-late") == [(lease_id, *XIA)]


def test_the_audit_names_the_operator_whose_force_ended_a_lease_still_on_record(make_any_table):
    """The lease still the lock's last: the record is rebuilt from the lock's item (holds)."""
    lease_id, told = run_yan(make_any_table, "two-ops-kept", hand_offs=0)
    assert "not held" in told
    assert shown(make_any_table, "two-ops-kept") == [(lease_id, *XIA)]


def _ended_by_keep_alive(make: Callable[..., Any], lock: str, lease_id: str) -> None:
    """The lease's keep-alive renewer ends it: the process it followed exited."""
    assert _keepalive_end(make("k"), (lock,), lease_id, "host k, pid 7", "pid 6 exited") == 0


def test_a_force_release_of_a_lease_its_keep_alive_ended_writes_no_audit_record(make_any_table):
    lease = make_any_table("a").acquire("ka", lease=600, wait=0)
    _ended_by_keep_alive(make_any_table, "ka", lease.lease_id)
    with pytest.raises(errors.NotHeld) as told:
        force_release(make_any_table("op"), "ka", reason="r", lease_id=lease.lease_id, actor="o")
    assert "keep-alive renewer ended it" in str(told.value)
    assert "not audited" in str(told.value)
    assert shown(make_any_table, "ka") == []


def test_a_force_refused_as_the_keep_alive_ended_the_lease_meanwhile_writes_none(make_any_table):
    lease = make_any_table("a").acquire("kb", lease=600, wait=0)

    def confirm(_record: Any) -> bool:  # shown the lease; meanwhile its keep-alive ended it
        _ended_by_keep_alive(make_any_table, "kb", lease.lease_id)
        make_any_table("w").acquire("kb", lease=600, wait=0)
        return True

    with pytest.raises(errors.NotHeld) as told:
        force_release(make_any_table("op"), "kb", reason="r", actor="o", confirm=confirm)
    assert "keep-alive renewer ended it" in str(told.value)
    assert shown(make_any_table, "kb") == []


def test_force_release_returns_its_record_as_the_audit_log_shows_it(make_any_table):
    # A lease whose holder named no host (an awsflock 0.2.0 client's has none): the record
    # the force-release answers (its --json) is the one `audit --json` lists, field for field.
    held = make_any_table("a")
    held.identity = Identity(owner="a", host="", pid=1)
    lease = held.acquire("nohost", lease=600, wait=0)
    told = force_release(make_any_table("op"), "nohost", reason="r", lease_id=lease.lease_id)
    assert audit_records(make_any_table("op"), "nohost") == [told]


@pytest.mark.parametrize("option", ["reason", "actor"])
def test_a_reason_or_actor_over_a_thousand_characters_is_refused_and_nothing_changes(
    make_any_table, option
):
    holder = make_any_table("holder")
    lease = holder.acquire("long-text", lease=600, wait=0)
    texts = {"reason": "r", "actor": "a", option: "x" * 1001}
    with pytest.raises(errors.UsageError) as refused:
        force_release(
            make_any_table("ops"), "long-text", lease_id=lease.lease_id, **texts
        )  # fmt: skip
    assert refused.value.one_line().startswith(f"--{option} is 1001 characters; at most 1000")
    assert holder.state("long-text").lease_id == lease.lease_id  # still held
    texts[option] = "x" * 1000
    force_release(make_any_table("ops"), "long-text", lease_id=lease.lease_id, **texts)
