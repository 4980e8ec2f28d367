"""The stores: where lock records live. Each implements ``awsflock.protocol.LockStore``.

- ``kinds``: the registry, the one front door: which store a URL (``--store``,
  ``AWSFLOCK_STORE``) names, how each kind is opened, and what each can do (its capabilities,
  declared once there). Nothing else chooses a store.
- ``resolve``: the rules that find the store a caller names from a URL, its arguments and the
  environment, the CLI's and ``awsflock.connect()``'s alike.
- ``remote``: what every network store shares: the request layer (budgets, retries, doubt),
  the link seam, the try on the wire (its deadline and gate), the facade of a store whose
  every step is one server-side call, and the shared form of a step's answer.
- ``programs``: reads the server-side step programs (Lua, PL/pgSQL) shipped as package data.
- ``memory``: in one process's memory, thread-safe; for tests and the simulator
  (``memory://`` names it for the library's callers only; ``memory_kind`` is its registry
  entry).
- ``dynamodb``: one DynamoDB table (the default; its sub-package owns the item layout, the
  condition expressions, the client, error translation and table administration).
- ``postgresql``: one PostgreSQL table and its step function (the ``postgres`` extra).
- ``redis``: keys under one prefix on a Redis server, and their step script (the ``redis``
  extra).

A new backend is a sub-package here: a link, a step program, a ``kind`` module and one line in
``kinds.KINDS``, and a store that passes the conformance suite (``tests/conformance/``); see
docs/contributing/writing-a-store.md. Nothing outside a backend's sub-package knows how it keeps
records. ``tests/test_overviews.py`` checks that this list names every kind.
"""
