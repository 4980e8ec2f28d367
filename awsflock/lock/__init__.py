"""The lock logic, on any store (``awsflock.protocol.LockStore``): ``lease`` (``LockTable``
and ``Lease``, the API), ``acquisition`` (one acquire's attempts and their clean-up),
``waiting`` and ``line`` (the waiting policies: plain, and fair in a line), ``heartbeat`` (the
lease renewed in the background that ``hold()`` returns), ``renewal`` (when to renew, when a
lease counts as lost), ``admin`` (force-release with its audit record, audit, pool-resize).

It speaks to stores only through their interface and never imports a backend; above it are the
process supervisors (``awsflock.supervise``) and the CLI."""
