"""``run --notify-after D CMD2``: once the hold has lasted D, CMD2 runs once, with ``sh -c``, in
a session of its own, and is not waited for: a page for the on-call about a deploy that holds
the lock too long. It gets CMD's environment (the lock's names and tokens, never the
LEASE_ID) and ``AWSFLOCK_HELD_FOR``, the seconds held. A hold that ends first runs nothing."""

from __future__ import annotations

import logging
import subprocess
import threading
import time

from awsflock.text import format_seconds

log = logging.getLogger("awsflock.run")


class Notifier:
    """The timer of one hold's ``--notify-after``: ``start()`` at the grant, ``cancel()`` at
    its end."""

    def __init__(self, after: float, command: str, env: dict[str, str]) -> None:
        self.after, self.command, self.env = after, command, env
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._wait, name="awsflock-notify", daemon=True)
        self.pid: int | None = None

    @classmethod
    def start_for(cls, notify: tuple[float, str] | None, env: dict[str, str]) -> Notifier | None:
        """The timer of ``--notify-after`` (``notify``: (D, CMD2), or None: none), started."""
        if notify is None:
            return None
        notifier = cls(*notify, env)
        notifier.start()
        return notifier

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def cancel(self) -> None:
        self._done.set()

    def _wait(self) -> None:
        if self._done.wait(self.after):
            return
        held_for = time.monotonic() - self._started
        env = {**self.env, "AWSFLOCK_HELD_FOR": f"{held_for:.0f}"}
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", self.command],
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            log.warning("--notify-after: could not run %r: %s", self.command, exc)
            return
        self.pid = proc.pid
        log.warning(
            "the lock has been held for %s: ran --notify-after's command (pid %d)",
            format_seconds(held_for),
            proc.pid,
            extra={"event": "notified", "held_for_s": round(held_for, 3)},
        )
        proc.wait()  # reaped here, if it ends before awsflock does (a daemon thread)
