"""Each kind's module, held to ``kinds.KindModule`` by mypy (which checks this file): a module
whose ``parse``, ``open`` or ``COMMANDS`` does not fit fails ``mypy`` here. At run time
``Kind.hooks`` checks that the names are there."""

from __future__ import annotations

from awsflock.stores import memory_kind
from awsflock.stores.dynamodb import kind as dynamodb
from awsflock.stores.kinds import KindModule
from awsflock.stores.postgresql import kind as postgresql
from awsflock.stores.redis import kind as redis

MODULES: dict[str, KindModule] = {
    "dynamodb": dynamodb,
    "postgresql": postgresql,
    "redis": redis,
    "memory": memory_kind,
}
