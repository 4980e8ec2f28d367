"""The DynamoDB Local part of scripts/bench_floors.py: the library's acquire+release beside the
same requests sent raw with botocore (recorded from one library cycle, replayed under fresh
names) and beside a plain conditional PutItem + DeleteItem."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any, Callable

import bench
from bench_floors import LEASE_S, Maker, interleave, library_maker

from tests.faultproxy import FaultProxy, _operation
from tests.servers import local_client

#: The errors of a conditional write its condition refused.
REFUSED = ("ConditionalCheckFailedException", "TransactionCanceledException")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class OperationCounter(FaultProxy):
    """The HTTP proxy, counting requests by their own operation (the fault proxy counts a
    TransactWriteItems as the UpdateItem it stands for)."""

    def _target(self, request: bytes) -> str:
        return _operation(request)


#: A recorded request: its operation, its parameters, and whether its condition refused it.
Recorded = tuple[str, dict[str, Any], bool]


def recorded_cycle(endpoint: str) -> tuple[list[Recorded], str]:
    """The requests one library acquire+release sends to ``endpoint``, as botocore's
    (operation, parameters, refused: whether its condition refused it), and the lock's name. A
    cycle first, so the table is described and the client warm, then the one recorded. The
    first grant ever of a name is two requests, the first refused (its pin on the fence
    record): the replay sends it too, and expects the refusal."""
    from awsflock.lock.lease import LockTable

    client = local_client(endpoint)
    table = LockTable("bench", client=client)
    library_maker(table)()()
    sent: list[tuple[str, dict[str, Any]]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        sent.append((model.name, json.loads(json.dumps(params))))

    def answered(parsed: dict[str, Any], **_: Any) -> None:
        code = parsed.get("Error", {}).get("Code", "")
        if code in REFUSED and sent:
            refused.add(len(sent) - 1)

    refused: set[int] = set()
    client.meta.events.register("before-parameter-build.dynamodb", record)
    client.meta.events.register("after-call.dynamodb", answered)
    name = bench.lock()
    table.acquire(name, wait=0).release()
    client.close()
    return [(op, params, n in refused) for n, (op, params) in enumerate(sent)], name


def replay_maker(client: Any, sent: list[Recorded], name: str) -> Maker:
    """The recorded requests sent again raw, each cycle under a fresh lock name and with fresh
    UUIDs (lease ids, versions: each recorded one replaced by the same new one throughout), so
    every condition holds as it did for the library. Times are sent as recorded."""
    from botocore import xform_name
    from botocore.exceptions import ClientError

    text = json.dumps(sent)
    found = set(UUID.findall(text))

    def make() -> Callable[[], None]:
        fresh = text.replace(name, bench.lock())
        for old in found:
            fresh = fresh.replace(old, str(uuid.uuid4()))
        calls = [
            (getattr(client, xform_name(op)), params, refused)
            for op, params, refused in json.loads(fresh)
        ]

        def cycle() -> None:
            for call, params, refused in calls:
                try:
                    call(**params)
                except ClientError as exc:
                    if not refused or exc.response.get("Error", {}).get("Code") not in REFUSED:
                        raise

        return cycle

    return make


def put_delete_maker(client: Any) -> Maker:
    """A plain conditional PutItem (taken where absent or expired), then a DeleteItem
    conditional on the lease."""

    def make() -> Callable[[], None]:
        name, lease = bench.lock(), str(uuid.uuid4())
        key = {"lock_id": {"S": name}}

        def cycle() -> None:
            now = int(time.time())
            client.put_item(
                TableName="bench",
                Item={**key, "lease_id": {"S": lease}, "expires": {"N": str(now + LEASE_S)}},
                ConditionExpression="attribute_not_exists(lock_id) OR expires < :now",
                ExpressionAttributeValues={":now": {"N": str(now)}},
            )
            client.delete_item(
                TableName="bench",
                Key=key,
                ConditionExpression="lease_id = :lease",
                ExpressionAttributeValues={":lease": {"S": lease}},
            )

        return cycle

    return make


def makers(endpoint: str, sent: list[Recorded], name: str) -> dict[str, Maker]:
    from awsflock.lock.lease import LockTable

    raw = local_client(endpoint)
    return {
        "library": library_maker(LockTable("bench", client=local_client(endpoint))),
        "same requests raw": replay_maker(raw, sent, name),
        "PutItem+Delete": put_delete_maker(raw),
    }


def floor(repeats: int, warmup: int) -> dict[str, Any]:
    """The library beside the same requests raw and beside PutItem+DeleteItem, on DynamoDB
    Local as users run it (JVM defaults, in memory). Requests are counted through the proxy
    (10 cycles each), timed direct."""
    from awsflock.lock.lease import LockTable

    server = bench.DynamoDBLocalAsRun().start(timeout=90)
    try:
        with OperationCounter(("127.0.0.1", server.port)) as http:
            LockTable("bench", client=local_client(http.url)).create()
            sent, name = recorded_cycle(http.url)
            counts: dict[str, dict[str, float]] = {}
            for key, make in makers(http.url, sent, name).items():
                make()()
                http.reset_counts()
                for _ in range(10):
                    make()()
                counts[f"{key}, HTTP requests (proxy)"] = {
                    k: v / 10 for k, v in sorted(http.counts.items())
                }
        samples = interleave(makers(server.url, sent, name), repeats, warmup)
    finally:
        server.stop()
    return {
        "samples": samples,
        "sent": counts,
        "library requests": [op for op, _, _ in sent],
    }
