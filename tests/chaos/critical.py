"""The critical section run under `awsflock run` in the chaos test.

It claims the shared record with its fencing token (a fenced write with no change), reads the
counter, pauses, and writes counter + 1 with a fenced write. The claim makes any older holder's
later write fail, so a paused (stale) holder can neither overwrite nor lose an update. Every step
is logged with its times, for the checker. Exit 0, or 3 if a write was refused as stale.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any


class Stale(Exception):
    """A fenced write refused: a higher token has written."""


def pg_writer(url: str, table: str) -> tuple:
    """The fenced record in a PostgreSQL table (``pk``, ``fence``, ``counter``): a write is
    accepted only if its token is not lower than the highest the row has seen."""
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    quoted = '"' + table + '"'

    def fenced(key: str, token: int, counter: int | None = None) -> None:
        done = conn.execute(
            f"INSERT INTO {quoted} (pk, fence, counter) VALUES (%s, %s, COALESCE(%s, 0))"
            f" ON CONFLICT (pk) DO UPDATE SET fence = EXCLUDED.fence,"
            f" counter = COALESCE(%s, {quoted}.counter) WHERE {quoted}.fence <= EXCLUDED.fence",
            (key, token, counter, counter),
        )
        if done.rowcount != 1:
            raise Stale(key)

    def read(key: str) -> int:
        row = conn.execute(f"SELECT counter FROM {quoted} WHERE pk = %s", (key,)).fetchone()
        return int(row[0]) if row else 0

    return fenced, read


#: The fenced write on Redis: one script, so the check and the write are one step.
REDIS_FENCED = """
local seen = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if seen > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'counter', ARGV[2]) end
return 1
"""


def redis_writer(url: str, prefix: str) -> tuple:
    """The fenced record in a Redis hash (``PREFIX:KEY``: ``fence``, ``counter``), written by a
    script that refuses a token lower than the highest the hash has seen."""
    import redis

    client = redis.Redis.from_url(url)
    script = client.register_script(REDIS_FENCED)

    def fenced(key: str, token: int, counter: int | None = None) -> None:
        done = script(keys=[f"{prefix}:{key}"], args=[token, "" if counter is None else counter])
        if int(done) != 1:
            raise Stale(key)

    def read(key: str) -> int:
        return int(client.hget(f"{prefix}:{key}", "counter") or 0)

    return fenced, read


def main() -> int:
    endpoint, table, log = sys.argv[1:4]
    if endpoint.startswith("postgresql://"):
        fenced, read = pg_writer(endpoint, table)
        return section(log, fenced, read)
    if endpoint.startswith("redis://"):
        fenced, read = redis_writer(endpoint, table)
        return section(log, fenced, read)
    import botocore.session

    from awsflock import StaleToken, fenced_update
    from awsflock.stores.dynamodb.client import LOCAL_ACCESS_KEY

    client = botocore.session.get_session().create_client(
        "dynamodb",
        region_name="us-east-1",
        endpoint_url=endpoint,
        # The key awsflock and the harness use: DynamoDB Local keeps tables per access key.
        aws_access_key_id=LOCAL_ACCESS_KEY,
        aws_secret_access_key=LOCAL_ACCESS_KEY,
    )

    def fenced(pk: str, token: int, counter: int | None = None) -> None:
        key = {"pk": {"S": pk}}
        try:
            if counter is None:
                fenced_update(client, table, key, token)
            else:
                fenced_update(
                    client,
                    table,
                    key,
                    token,
                    update="SET #c = :c",
                    names={"#c": "counter"},
                    values={":c": {"N": str(counter)}},
                )
        except StaleToken:
            raise Stale(pk) from None

    def read(pk: str) -> int:
        item = client.get_item(TableName=table, Key={"pk": {"S": pk}}, ConsistentRead=True)
        return int(item.get("Item", {}).get("counter", {}).get("N", "0"))

    return section(log, fenced, read)


def section(log: str, fenced: Any, read: Any) -> int:
    """Claim the record with the lease's token, read the counter, pause, write it plus one."""
    lock = os.environ["AWSFLOCK_LOCK_ID"]
    slot = os.environ.get("AWSFLOCK_SLOT")
    token = int(os.environ["AWSFLOCK_FENCING_TOKEN"])
    key = f"{lock}#{slot or '-'}"
    entry: dict = {
        "lock": lock,
        "slot": int(slot) if slot else None,
        "token": token,
        "pid": os.getpid(),
    }
    with open(os.environ["CHAOS_PIDFILE"], "w") as f:
        f.write(str(os.getpid()))
    status = 0
    entry["claim_sent"] = time.time()
    try:
        fenced(key, token)
        entry["claim"] = "accepted"
    except Stale:
        entry["claim"] = "refused"
    entry["claim_done"] = time.time()
    if entry["claim"] == "accepted":
        value = read(key)
        time.sleep(random.uniform(0.05, 0.4))
        entry["write_sent"] = time.time()
        # Announce the write first: if this process is killed before it logs the outcome, the
        # checker knows a write may have landed unlogged.
        with open(log, "a") as f:
            f.write(json.dumps({**entry, "write": "pending"}) + "\n")
        try:
            fenced(key, token, value + 1)
            entry["write"] = "accepted"
        except Stale:
            entry["write"] = "refused"
            status = 3
        entry["write_done"] = time.time()
    else:
        status = 3
    with open(log, "a") as f:
        f.write(json.dumps(entry) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
