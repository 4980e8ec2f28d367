"""The stores: where lock records live. Each implements ``awsflock.protocol.LockStore``.

- ``kinds``: the registry, the one front door: which store a URL (``--store``,
  ``AWSFLOCK_STORE``) names, how each kind is opened, and what each can do (its capabilities,
  declared once there). Nothing else chooses a store.
- ``retrying``: the request layer the network stores share (retries within a budget).
- ``memory``: in one process's memory, thread-safe; for tests and the simulator (no URL
  names it; ``memory_kind`` is its registry entry).
- ``dynamodb``: one DynamoDB table (the default; its sub-package owns the item layout, the
  condition expressions, the client, error translation and table administration).
- ``postgresql``: one PostgreSQL table and its step function (the ``postgres`` extra).
- ``redis``: keys under one prefix on a Redis server, and their step script (the ``redis``
  extra).

A new backend is a sub-package here with a ``kind`` module, one line in ``kinds.KINDS``, and a
store that passes the conformance suite (``tests/conformance/``); see "Writing a store" in
docs/contributing/architecture.md. Nothing outside a backend's sub-package knows how it keeps
records. ``tests/test_overviews.py`` checks that this list names every kind.
"""
