"""The Redis store (the ``redis`` extra, redis-py; Valkey too): see ``store``."""

from awsflock.stores.redis.store import RedisStore

__all__ = ["RedisStore"]
