"""Finding: `awsflock audit` (one Scan of the table, page by page) can miss a record that
exists for its whole run. On dynalite a killed force's record sits in its lock's item
(``xa_``); moving it puts the audit item, then drops ``xa_``. A scan that read the audit
item's place before the put and reaches the lock's item after the drop sees neither.

Here 8 forces' runs are killed after their UpdateItem (records kept in the lock items); a
reader lists them (8). Then a listing runs with one item per page, and after its 4th page a
re-run moves every kept record (put_audit, as `_ensure_audit`/`_record_retried` do).

    nice -n 19 .venv/bin/python -m adversary.adv_audit_scan_race
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from adversary.common import dynalite, new_table
from awsflock.lock.admin import force_release
from awsflock.lock.lease import LockTable
from awsflock.protocol import audit_key
from awsflock.records import Identity
from awsflock.stores.dynamodb import DynamoDBStore
from tests.servers import local_client
from tests.test_audit_without_transactions import killed_after_its_force


def table_of(url: str, table: str, owner: str) -> LockTable:
    store = DynamoDBStore(table, local_client(url))
    return LockTable(store=store, identity=Identity(owner=owner, host=owner, pid=1))


def main() -> int:
    with dynalite() as srv:
        table = new_table(srv.url)
        for i in range(8):
            lock = f"race-{i}-{uuid.uuid4().hex[:4]}"
            lease = table_of(srv.url, table, "h").acquire(lock, lease=600, wait=0)
            op = table_of(srv.url, table, "op")
            killed_after_its_force(op)
            with pytest.raises(SystemExit):
                force_release(op, lock, reason="stuck", lease_id=lease.lease_id, actor="ana")
        reader = table_of(srv.url, table, "r").store
        kept = list(reader.audit_entries())
        print("records before:", len(kept))
        listing = table_of(srv.url, table, "r2").store
        mover = table_of(srv.url, table, "m").store
        real_scan = listing.client.scan
        pages = [0]

        def scan(**kwargs: Any) -> Any:
            page = real_scan(**kwargs)
            pages[0] += 1
            if pages[0] == 4:
                for entry in kept:  # a re-run moves each record: put, then drop
                    mover.put_audit(audit_key(entry["lease_id"]), entry)
            return page

        listing.client.scan = scan
        seen = list(listing.audit_entries(page_size=1))
        after = list(reader.audit_entries())
        print(f"listing during the moves: {len(seen)} records; after: {len(after)}")
        ok = len(seen) == len(kept)
        print("HELD" if ok else f"VIOLATION: a listing missed {len(kept) - len(seen)} records")
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
