"""The conformance suite on the asynchronous store seam (``AsyncLockStore``): ``Awaited`` shows
an awaited store as a ``LockStore`` again, each lock step run to its end in an event loop of
the calling thread's own (so the suite's concurrent threads each run theirs, on connections of
their own), and the operators' steps, which stay synchronous, on the store beneath it. A store
passes on both APIs by passing the suite twice: as it is, and through
``Awaited(kinds.awaited(store))``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class Awaited:
    """``awaited`` (an ``AsyncLockStore`` with the ``LockStore`` it awaits in ``sync``) as a
    ``LockStore``. ``close()`` closes the connections of every loop, then the loops."""

    _STEPS = ("take", "join", "beat", "leave", "renew", "release", "read")

    def __init__(self, awaited: Any) -> None:
        self.awaited = awaited
        self.sync = awaited.sync
        self._local = threading.local()
        self._loops: list[asyncio.AbstractEventLoop] = []
        self._guard = threading.Lock()

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = getattr(self._local, "loop", None)
        if loop is None:
            loop = self._local.loop = asyncio.new_event_loop()
            with self._guard:
                self._loops.append(loop)
        return loop

    def __getattr__(self, name: str) -> Any:
        if name in self._STEPS:
            step = getattr(self.awaited, name)

            def run(*args: Any, **kwargs: Any) -> Any:
                return self._loop().run_until_complete(step(*args, **kwargs))

            return run
        if name in ("kind", "table_name", "request_timeout", "clock", "skew_free", "where"):
            return getattr(self.awaited, name)
        return getattr(self.sync, name)  # the operators' steps, scans, set-up

    def close(self) -> None:
        close_async = getattr(self.awaited, "close_async", None)
        for loop in self._loops:
            if close_async is not None:
                loop.run_until_complete(close_async())
            loop.close()
        self.awaited.close()
