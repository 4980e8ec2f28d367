"""Holding a lock while work runs: ``heartbeat`` renews a lease in the background and says when
it is lost (``LockTable.hold()``); ``runner`` is ``awsflock run``, which holds a lock while a
command runs and stops the command before its lease could be taken by another."""
