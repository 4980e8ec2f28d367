"""The least-privilege IAM policy for a lock table (``awsflock iam-policy``)."""

from __future__ import annotations

import json
from typing import Any

#: What each command needs on the table. A take is a transaction with a ConditionCheck (of the
#: lease's done item), and a release or force-release one that puts the lease's done item (an
#: acquire releases an attempt it gives up; ``--keep-alive`` ends a lease whose process died);
#: one that finds nothing under its LEASE_ID bars it in a transaction with a ConditionCheck.
#: The state kept with a lock (``--state-file``, ``status --state``) is read with BatchGetItem
#: and written by a renewal's transaction, whose item is read after it (GetItem).
COMMAND_ACTIONS = {
    "table-create": ["CreateTable", "DescribeTable", "DescribeTimeToLive", "UpdateTimeToLive"],
    "acquire": ["UpdateItem", "GetItem", "ConditionCheckItem", "PutItem", "BatchGetItem"],
    "renew": ["UpdateItem", "GetItem"],
    "release": ["UpdateItem", "GetItem", "PutItem", "ConditionCheckItem"],
    "run": ["UpdateItem", "GetItem", "ConditionCheckItem", "PutItem", "BatchGetItem"],
    "status": ["GetItem", "BatchGetItem"],
    "list": ["DescribeTable", "Scan"],
    "force-release": ["GetItem", "UpdateItem", "PutItem", "ConditionCheckItem"],
    "audit": ["DescribeTable", "Scan"],
    "pool-resize": ["GetItem", "UpdateItem"],
}
READ_ONLY = ("status", "list", "audit")


def iam_policy(
    table: str, *, read_only: bool = False, region: str = "*", account: str = "*"
) -> str:
    """The least-privilege IAM policy document for the table, as JSON."""
    arn = f"arn:aws:dynamodb:{region}:{account}:table/{table}"

    def statement(sid: str, commands: tuple[str, ...]) -> dict[str, Any]:
        actions = sorted({f"dynamodb:{a}" for c in commands for a in COMMAND_ACTIONS[c]})
        return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": arn}

    if read_only:
        statements = [statement("AwsflockReadOnly", READ_ONLY)]
    else:
        statements = [
            statement("AwsflockLocks", tuple(c for c in COMMAND_ACTIONS if c != "table-create")),
            # Only for whoever runs `awsflock table-create` once; drop it for everyone else.
            statement("AwsflockTableSetup", ("table-create",)),
        ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, indent=2)
