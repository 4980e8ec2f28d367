"""Finding: a force-release of an awsflock 0.2.0 client's lease on dynalite, its run SIGKILLed
after the force's UpdateItem (before its audit record is moved to its own item): a 0.2.0
client's acquire, a skew window later, overwrites the lock's item with PutItem, and the kept
record (xa_..., unaudited) is gone. `awsflock audit` then lists nothing, though the force
applied (the 0.2.0 holder's renew is refused).

    nice -n 19 .venv/bin/python -m adversary.adv_020_reclaim
"""

from __future__ import annotations

import time

from adversary.common import (
    FaultProxy,
    audit,
    dynalite,
    force_killed_at,
    new_table,
    old,
    raw_item,
)


def main() -> int:
    with dynalite() as srv:
        table = new_table(srv.url)
        lock = "legacy"
        got = old(srv.url, table, "acquire", lock, "--no-wait", "--lease-duration", "1h")
        assert got.returncode == 0, got.stderr
        lease = got.stdout.strip()
        print("0.2.0 holds", lease)
        with FaultProxy(("127.0.0.1", srv.port)) as proxy:
            # GetItem (read), UpdateItem (the force, with its kept record), PutItem (the move):
            # the PutItem never answers and the CLI is killed.
            force_killed_at(proxy, table, lock, lease, "ana", "PutItem", 1)
        item = raw_item(srv.url, table, lock) or {}
        print(
            "after the kill: kept record names",
            sorted(k for k in item if k.startswith("xa_")),
            "expiration_time",
            item.get("expiration_time"),
            "kept_until" in item,
        )
        print("audit:", [(r["lease_id"], r["actor"]) for r in audit(srv.url, table, lock)])
        renew = old(srv.url, table, "renew", lock, lease, "--lease-duration", "1h")
        print("0.2.0 holder's renew exit", renew.returncode, "(3: its lease was ended)")
        time.sleep(7)  # the force's TTL is its time plus the 5 s skew; 0.2.0 waits 5 s more
        took = None
        for _ in range(10):
            took = old(srv.url, table, "acquire", lock, "--no-wait")
            if took.returncode == 0:
                break
            time.sleep(1)
        print("0.2.0 acquire exit", took.returncode if took else None)
        item = raw_item(srv.url, table, lock) or {}
        print("item now:", sorted(item))
        records = audit(srv.url, table, lock)
        print("audit:", [(r["lease_id"], r["actor"]) for r in records])
        ok = len(records) == 1 and records[0]["actor"] == "ana"
        print("HELD" if ok else "VIOLATION: an applied force-release has no audit record")
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
