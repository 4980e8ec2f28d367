"""The downstream side of fencing tokens: a DynamoDB write that a stale holder cannot make.

A holder passes its lease's fencing token with every write to the resource it protects. The
resource remembers the highest token it accepted and refuses lower ones, so a holder that lost
its lease (paused, partitioned, clock gone wrong) cannot overwrite a newer holder's work::

    from awsflock import fenced_update
    fenced_update(client, "app-state", {"pk": {"S": "deploy-prod"}}, held.fencing_token,
                  update="SET #state = :state", names={"#state": "state"},
                  values={":state": {"S": "applied"}})

The same rule in SQL: ``UPDATE t SET ..., fence = :token WHERE id = :id AND fence <= :token``.
"""

from __future__ import annotations

from typing import Any

from awsflock import errors, metrics

#: Accept the write only if no higher token was accepted before. Equal is the same holder again.
COND_FENCE = "attribute_not_exists(#awsflock_fence) OR #awsflock_fence <= :awsflock_token"


class StaleToken(errors.NotHeld):
    """The resource already accepted a higher fencing token: a newer holder exists."""


def fenced_update(
    client: Any,
    table: str,
    key: dict[str, Any],
    token: int,
    *,
    update: str = "",
    names: dict[str, str] | None = None,
    values: dict[str, Any] | None = None,
    attribute: str = "fence",
    condition: str = "",
) -> dict[str, Any]:
    """One conditional UpdateItem on the caller's own item, accepted only if ``token`` is not
    lower than the highest token the item has seen; records ``token`` in ``attribute``.

    ``update`` is a ``SET ...`` expression of the caller's own changes (may be empty);
    ``condition`` an extra condition ANDed in. Returns the new item (``ALL_NEW``). Raises
    StaleToken if a newer holder wrote first.
    """
    if not isinstance(token, int) or isinstance(token, bool) or token <= 0:
        raise errors.UsageError(f"fencing token must be a positive integer, got {token!r}")
    sets = "#awsflock_fence = :awsflock_token"
    expression = update.strip()
    if expression.upper().startswith("SET "):
        expression = f"SET {sets}, {expression[4:]}"
    elif expression:
        expression = f"SET {sets} {expression}"
    else:
        expression = f"SET {sets}"
    cond = f"({COND_FENCE})" + (f" AND ({condition})" if condition else "")
    from botocore.exceptions import ClientError

    try:
        response = client.update_item(
            TableName=table,
            Key=key,
            UpdateExpression=expression,
            ConditionExpression=cond,
            ExpressionAttributeNames={**(names or {}), "#awsflock_fence": attribute},
            ExpressionAttributeValues={**(values or {}), ":awsflock_token": {"N": str(token)}},
            ReturnValues="ALL_NEW",
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            metrics.record("awsflock.fencing.rejections", 1, None, "dynamodb", table=table)
            raise StaleToken(
                f"write to {table!r} refused: fencing token {token} is stale",
                hint="a newer lock holder has written since; stop and do not retry",
            ) from None
        raise
    return dict(response.get("Attributes", {}))
