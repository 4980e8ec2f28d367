"""The PostgreSQL store (the ``postgres`` extra, psycopg 3): see ``store``."""

from awsflock.stores.postgresql.store import PostgresStore

__all__ = ["PostgresStore"]
