"""The stores: where lock records live. Each implements ``awsflock.protocol.LockStore``.

- ``kinds``: the registry, the one front door: which store a URL (``--store``,
  ``AWSFLOCK_STORE``) names, and how each kind is opened. Nothing else chooses a store.
- ``retrying``: the request layer the network stores share (retries within a budget).
- ``memory``: in one process's memory, thread-safe; for tests and the simulator.
- ``dynamodb``: one DynamoDB table (the default; its sub-package owns the item layout, the
  condition expressions, the client, error translation and table administration).
- ``postgresql``: one PostgreSQL table and its step function (the ``postgres`` extra).

A new backend is a sub-package here with a ``kind`` module, one line in ``kinds.KINDS``, and a
store that passes the conformance suite (``tests/conformance/``); see "Writing a store" in
docs/contributing/architecture.md. Nothing outside a backend's sub-package knows how it keeps
records.
"""
