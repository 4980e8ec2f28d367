"""What a simulated worker does with shared holders (``awsflock.shares``): a share of a plain
lock taken through the real library, ``table.acquire(name, shared=True)`` (waiting or not),
beside exclusive holders and sets of the same names; a fenced write while the share is valid
by the holder's clock (a reader's claim to have read after every earlier writer). Mixed into
``clients.Client``, whose ``hold_work`` holds a share with ``table.lock(name, shared=True)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awsflock import errors

if TYPE_CHECKING:
    from tests.simulation.checker import Checker
    from tests.simulation.world import Proc


class ShareWork:
    """A worker's share operations (``Client`` supplies what is declared here)."""

    proc: Proc
    checker: Checker
    rng: Any
    table: Any

    if TYPE_CHECKING:

        def count(self) -> bool: ...

        def pause(self, low: float, high: float) -> None: ...

        def renew(self, lease: Any, key: Any, shared: bool = False) -> bool: ...

        def release(self, lease: Any, key: Any) -> None: ...

        def fenced_write(self, lease: Any) -> None: ...

    def share_work(self, name: str) -> None:
        """A share acquired (waiting or not), read under, renewed, released or walked away."""
        if not self.count():
            return
        wait = self.rng.choice((0.0, 0.0, 5.0, 20.0, 60.0))
        lease_s = self.rng.choice((5.0, 10.0, 20.0, 40.0))
        try:
            lease = self.table.acquire(name, lease=lease_s, wait=wait, shared=True)
        except errors.AwsflockError:
            self.checker.no_phantom(self.proc, name)
            raise
        key = (name, None)
        self.checker.told_acquired(self.proc, key, lease, lease_s)
        self.checker.hold(
            self.proc, key, lease.lease_id, lease.fencing_token, lease.expires_at, shared=True
        )
        self.fenced_write(lease)
        for _ in range(self.rng.randrange(1, 6)):
            self.pause(0.0, lease_s / 2)
            if not self.count():
                break
            if lease.remaining() < lease_s / 2 and not self.renew(lease, key, shared=True):
                return
            self.fenced_write(lease)
        if self.rng.random() < 0.9 and self.count():
            self.release(lease, key)
        else:
            self.checker.drop(lease.lease_id)  # walks away; the share runs out
