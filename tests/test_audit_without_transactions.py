"""The audit record of a force-release where the store has no transactions (dynalite; the
in-memory store with ``transactions=False``): the force's own write keeps it, so a run killed
right after its force still leaves exactly one record naming its operator, however many times
the lock changes hands before anyone looks. The same on dynalite in
tests/integration/test_audit_operators.py."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from awsflock.lock.admin import force_release
from awsflock.lock.audit_log import audit_records
from awsflock.lock.lease import LockTable
from awsflock.records import Identity
from awsflock.stores.memory import MemoryStore
from tests.helpers import ScriptedWrites


def _no_transactions(send: Any, kwargs: dict[str, Any]) -> Any:
    from botocore.exceptions import ClientError

    if "TransactItems" in kwargs:
        raise ClientError(
            {"Error": {"Code": "UnknownOperationException", "Message": ""}},
            "TransactWriteItems",
        )
    return send()


@pytest.fixture(params=["dynamodb", "memory"])
def make_plain(request, clock) -> Callable[..., LockTable]:
    """LockTables on one store without transactions: DynamoDB on moto (its transactions
    refused, as dynalite's are), or the in-memory store with ``transactions=False``."""
    memory = MemoryStore(transactions=False)
    moto = request.getfixturevalue("moto") if request.param == "dynamodb" else None

    def make(owner: str) -> LockTable:
        identity = Identity(owner=owner, host=owner, pid=100)
        if moto is None:
            return LockTable(store=memory, clock=clock, identity=identity)
        client = ScriptedWrites(moto, lambda n, send, kwargs: _no_transactions(send, kwargs))
        return LockTable("awsflock", client=client, clock=clock, identity=identity)

    make.kind = request.param  # type: ignore[attr-defined]
    return make


def killed_after_its_force(table: LockTable) -> None:
    """``table``'s run dies right after its force's write, before anything else is sent."""

    def killed(*_args: Any, **_kwargs: Any) -> None:
        raise SystemExit("killed right after the force was applied")

    if hasattr(table.store, "_put_audit"):
        table.store._put_audit = killed  # type: ignore[attr-defined]
    real = table.store.force_release

    def force_then_die(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise SystemExit("killed as its answer came back")

    table.store.force_release = force_then_die  # type: ignore[method-assign]


@pytest.mark.parametrize("slots", [None, 2])
def test_a_run_killed_after_its_force_leaves_its_record_through_any_hand_offs(
    make_plain, slots
) -> None:
    """Before: on dynalite the record was a second write after the force; a run killed between
    them left no record at all, and once the lock changed hands a few times (its item
    remembers three leases) no rerun could write one."""
    extra = {} if slots is None else {"slots": slots}
    lease = make_plain("a").acquire("deploy", lease=600, wait=0, **extra)
    ana = make_plain("op")
    killed_after_its_force(ana)
    with pytest.raises(SystemExit):
        force_release(ana, "deploy", reason="stuck", lease_id=lease.lease_id, actor="ana")
    for n in range(5):  # more hand-offs than the item remembers
        make_plain(f"w{n}").acquire("deploy", lease=600, wait=0, **extra).release()
    entries = list(make_plain("reader").store.audit_entries())
    assert [(e["lease_id"], e["actor"], e["reason"], e["status"]) for e in entries] == [
        (lease.lease_id, "ana", "stuck", "applied")
    ]
    assert [r["actor"] for r in audit_records(make_plain("reader"), "deploy")] == ["ana"]


@pytest.mark.parametrize("make_plain", ["dynamodb"], indirect=True)
def test_a_record_kept_in_the_lock_item_moves_to_its_own_item(make_plain) -> None:
    """The lock's item keeps a record only until it is copied (it would otherwise grow to
    DynamoDB's 400 KB with every force); listed once while both exist. (The in-memory store
    writes the record itself in the force's write.)"""
    lease = make_plain("a").acquire("deploy", lease=600, wait=0)
    ana = make_plain("op")
    killed_after_its_force(ana)
    with pytest.raises(SystemExit):
        force_release(ana, "deploy", reason="stuck", lease_id=lease.lease_id, actor="ana")
    reader = make_plain("reader")
    item = reader.store.client.get_item(  # type: ignore[attr-defined]
        TableName="awsflock", Key={"lock_id": {"S": "deploy"}}
    )["Item"]
    assert "unaudited" in item
    # Any put of the applied record (a rerun's, or the next force's own) moves it.
    from awsflock.protocol import audit_key

    (entry,) = reader.store.audit_entries()

    def killed(*_args: Any) -> None:
        raise SystemExit("killed between the copy and the drop")

    reader.store._drop_pending_audit = killed  # type: ignore[attr-defined]
    with pytest.raises(SystemExit):
        reader.store.put_audit(audit_key(lease.lease_id), entry)
    assert list(reader.store.audit_entries()) == [entry]  # in both places, listed once
    del reader.store._drop_pending_audit  # type: ignore[attr-defined]
    reader.store.put_audit(audit_key(lease.lease_id), entry)
    item = reader.store.client.get_item(  # type: ignore[attr-defined]
        TableName="awsflock", Key={"lock_id": {"S": "deploy"}}
    )["Item"]
    assert not [name for name in item if name.startswith("xa_") or name == "unaudited"]
    assert [r["actor"] for r in audit_records(reader, "deploy")] == ["ana"]


def test_a_force_release_that_lives_leaves_nothing_in_the_lock_item(make_plain) -> None:
    lease = make_plain("a").acquire("deploy", lease=600, wait=0)
    op = make_plain("op")
    force_release(op, "deploy", reason="stuck", lease_id=lease.lease_id, actor="ana")
    assert [r["actor"] for r in audit_records(op, "deploy")] == ["ana"]
    if make_plain.kind == "dynamodb":
        item = op.store.client.get_item(  # type: ignore[attr-defined]
            TableName="awsflock", Key={"lock_id": {"S": "deploy"}}
        )["Item"]
        assert not [name for name in item if name.startswith("xa_") or name == "unaudited"]


@pytest.mark.parametrize("make_plain", ["dynamodb"], indirect=True)
def test_the_next_force_moves_the_records_dead_runs_left_in_the_item(make_plain) -> None:
    """A record whose run died stays in its lock's item while nobody re-runs that force (a
    re-run after a hand-off exits 3, nothing to force): each such record would keep its
    reason's bytes in the item for good, towards DynamoDB's 400 KB. The next force-release of
    the lock moves them all."""
    stranded = []
    for n in range(2):
        lease = make_plain(f"h{n}").acquire("deploy", lease=600, wait=0)
        op = make_plain("op")
        killed_after_its_force(op)
        with pytest.raises(SystemExit):
            force_release(op, "deploy", reason=f"stuck {n}", lease_id=lease.lease_id, actor="ana")
        stranded.append(lease.lease_id)
    last = make_plain("h").acquire("deploy", lease=600, wait=0)
    op = make_plain("op")
    force_release(op, "deploy", reason="stuck again", lease_id=last.lease_id, actor="bo")
    item = op.store.client.get_item(  # type: ignore[attr-defined]
        TableName="awsflock", Key={"lock_id": {"S": "deploy"}}
    )["Item"]
    assert not [name for name in item if name.startswith("xa_") or name == "unaudited"]
    records = audit_records(op, "deploy")
    assert sorted((r["lease_id"], r["actor"]) for r in records) == sorted(
        [(stranded[0], "ana"), (stranded[1], "ana"), (last.lease_id, "bo")]
    )


def _reclaimed_by_020(client: Any, lock_id: str, now: float) -> bool:
    """awsflock 0.2.0's acquire at ``now``: read the item, and overwrite it (PutItem, on the
    ``lease_id`` it read) if its ``expiration_time`` is more than 5 s past."""
    from botocore.exceptions import ClientError

    item = client.get_item(TableName="awsflock", Key={"lock_id": {"S": lock_id}})["Item"]
    if now - int(item["expiration_time"]["N"]) <= 5:
        return False
    new = {
        "lock_id": {"S": lock_id},
        "lease_id": {"S": "0.2.0-new-lease"},
        "lease_duration": {"N": "60"},
        "owner": {"S": "old-client"},
        "expiration_time": {"N": str(int(now) + 60)},
    }
    try:
        client.put_item(
            TableName="awsflock",
            Item=new,
            ConditionExpression="#l = :l",
            ExpressionAttributeNames={"#l": "lease_id"},
            ExpressionAttributeValues={":l": item["lease_id"]},
        )
    except ClientError:
        return False
    return True


@pytest.mark.parametrize("make_plain", ["dynamodb"], indirect=True)
def test_a_020_client_never_overwrites_the_record_a_killed_force_left_in_the_item(
    make_plain, moto, clock
) -> None:
    """Before: the force of an awsflock 0.2.0 client's lease left the item to expire at the
    force plus the skew, and a 0.2.0 acquire seconds later overwrote it (PutItem), the kept
    record with it: a run killed before moving it left an applied force with no record. The
    force's write now keeps the item for good, as a take there does."""
    old_lease = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
    moto.put_item(
        TableName="awsflock",
        Item={
            "lock_id": {"S": "legacy"},
            "lease_id": {"S": old_lease},
            "lease_duration": {"N": "3600"},
            "owner": {"S": "old-client"},
            "expiration_time": {"N": str(int(clock.time()) + 3600)},
        },
    )
    ana = make_plain("op")
    killed_after_its_force(ana)
    with pytest.raises(SystemExit):
        force_release(ana, "legacy", reason="stuck", lease_id=old_lease, actor="ana")
    assert not _reclaimed_by_020(moto, "legacy", clock.time() + 86400)  # a day later
    records = audit_records(make_plain("reader"), "legacy")
    assert [(r["lease_id"], r["actor"]) for r in records] == [(old_lease, "ana")]


def _scan_in_order(client: Any, first: Callable[[str], bool]) -> Callable[..., Any]:
    """``client.scan`` serving one matching item per page, keys for which ``first`` holds
    before the others (dynalite's order is its keys' hashes), each page read from the table
    as it is then."""
    real = client.scan

    def scan(**kwargs: Any) -> Any:
        after = kwargs.pop("ExclusiveStartKey", None)
        kwargs.pop("Limit", None)
        items = real(**kwargs)["Items"]
        order = sorted(items, key=lambda i: (not first(i["lock_id"]["S"]), i["lock_id"]["S"]))
        if after is not None:
            start = (not first(after["lock_id"]["S"]), after["lock_id"]["S"])
            order = [i for i in order if (not first(i["lock_id"]["S"]), i["lock_id"]["S"]) > start]
        page = order[:1]
        return {"Items": page, **({"LastEvaluatedKey": page[0]} if len(order) > 1 else {})}

    return scan


@pytest.mark.parametrize("make_plain", ["dynamodb"], indirect=True)
def test_a_listing_during_the_move_of_kept_records_lists_every_one(make_plain) -> None:
    """Before: one scan read audit items and locks' items with kept records; a record moved
    while it ran (its item put where the scan had passed, then dropped from its lock's item
    ahead of the scan) was listed nowhere, though it existed throughout."""
    leases = []
    for lock in ("a1", "a2", "a3"):
        lease = make_plain("h").acquire(lock, lease=600, wait=0)
        op = make_plain("op")
        killed_after_its_force(op)
        with pytest.raises(SystemExit):
            force_release(op, lock, reason="stuck", lease_id=lease.lease_id, actor="ana")
        leases.append(lease.lease_id)
    from awsflock.protocol import audit_key

    kept = list(make_plain("r").store.audit_entries())
    listing, mover = make_plain("listing").store, make_plain("mover").store
    client = listing.client  # type: ignore[attr-defined]
    scan = _scan_in_order(client, lambda key: key.startswith("#awsflock#audit#"))
    pages = []

    def scan_then_move(**kwargs: Any) -> Any:
        page = scan(**kwargs)
        pages.append(page)
        if len(pages) == 1:  # a re-run moves every kept record
            for entry in kept:
                mover.put_audit(audit_key(entry["lease_id"]), entry)
        return page

    client.scan = scan_then_move
    listed = sorted(e["lease_id"] for e in listing.audit_entries(page_size=1))
    assert listed == sorted(leases)
