"""Processes that hold a lock for others: ``runner`` is ``awsflock run`` (a command held under
a lock, stopped before its lease could be taken by another); ``keepalive`` is the detached
renewer of ``acquire --keep-alive``. Used by the CLI; built on ``awsflock.lock``."""
