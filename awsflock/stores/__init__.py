"""The stores: where lock records live. Each implements ``awsflock.protocol.LockStore``.

- ``memory``: in one process's memory, thread-safe; for tests and the simulator.
- ``dynamodb``: one DynamoDB table (the default; its sub-package owns the item layout, the
  condition expressions, the client, error translation and table administration).
- ``postgresql``: one PostgreSQL table and its step function (the ``postgres`` extra).
- ``urls``: store URLs (``--store``, ``AWSFLOCK_STORE``) and which store each names.

A new backend is a sub-package here whose store passes the conformance suite
(``tests/conformance/``). Nothing outside a backend's sub-package knows how it keeps records.
"""
