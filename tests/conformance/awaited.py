"""The conformance suite on the asynchronous store seam (``AsyncLockStore``): ``Awaited`` shows
an awaited store as a ``LockStore`` again, each lock step run to its end in an event loop of its
own (so the suite's concurrent threads each run theirs), and the operators' steps, which stay
synchronous, on the store beneath it. A store passes on both APIs by passing the suite twice:
as it is, and through ``Awaited(kinds.awaited(store))``."""

from __future__ import annotations

import asyncio
from typing import Any


class Awaited:
    """``awaited`` (an ``AsyncLockStore`` with the ``LockStore`` it awaits in ``sync``) as a
    ``LockStore``."""

    _STEPS = ("take", "join", "beat", "leave", "renew", "release", "read")

    def __init__(self, awaited: Any) -> None:
        self.awaited = awaited
        self.sync = awaited.sync

    def __getattr__(self, name: str) -> Any:
        if name in self._STEPS:
            step = getattr(self.awaited, name)

            def run(*args: Any, **kwargs: Any) -> Any:
                return asyncio.run(step(*args, **kwargs))

            return run
        if name in ("kind", "table_name", "request_timeout", "clock", "skew_free", "where"):
            return getattr(self.awaited, name)
        return getattr(self.sync, name)  # the operators' steps, scans, set-up
