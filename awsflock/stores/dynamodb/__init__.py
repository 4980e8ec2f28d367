"""The DynamoDB store: one table, one item per lock, every step one conditional UpdateItem.

``store`` holds ``DynamoDBStore``, made of ``base`` (client, requests, errors, reads), ``takes``
(the take) and ``steps`` (every other step); ``kind`` is its registry entry; ``items`` the item
layout shared with awsflock 0.2.0; ``expressions`` the condition and update expressions;
``translate`` botocore's errors as awsflock's; ``client`` the botocore client; ``tables`` table-
create; ``fencing`` a fenced write helper for your own DynamoDB tables; ``devserver`` a local
endpoint. Only this sub-package imports botocore.
"""

from awsflock.stores.dynamodb.store import DynamoDBStore

__all__ = ["DynamoDBStore"]
