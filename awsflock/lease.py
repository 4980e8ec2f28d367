"""The lease logic: acquire with prompt, cheap waiting; renew; release. Speaks to a ``Store``.

The single attempt and its clean-up live in ``awsflock.acquisition``; the wait loop is
``LockTable.acquire``. What a refused renew or release means (released, force-released, expired,
taken by another, or a retry of our own that already happened) is decided by ``_verdict``.
"""

from __future__ import annotations

import logging
import random
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from awsflock import errors
from awsflock.acquisition import Acquisition, new_lease_id
from awsflock.clock import Clock, SystemClock
from awsflock.durations import format_seconds, lease_seconds, skew_seconds, wait_limit
from awsflock.items import ENDED_FORCED, ENDED_RELEASED
from awsflock.records import RESERVED_PREFIX, Identity, LockRecord
from awsflock.store import DEFAULT_REQUEST_TIMEOUT, Outcome, Store

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from awsflock.heartbeat import Hold, LostCallback

__all__ = ["WAIT_FOREVER", "Lease", "LockTable", "new_lease_id"]

log = logging.getLogger("awsflock.lease")

#: DynamoDB allows partition keys of up to 2048 bytes (UTF-8).
MAX_LOCK_ID_BYTES = 2048
#: A waiter polls about once a second (jittered), so it sees a release within about a second.
POLL_INTERVAL = 1.0
POLL_JITTER = 0.25
DEFAULT_SKEW = 5.0
DEFAULT_LEASE = 2 * 3600.0  # awsflock 0.2.0's default for acquire and renew
DEFAULT_WAIT = 60.0
#: ``acquire(wait=WAIT_FOREVER)`` waits until the lock is free; ``wait=0`` does not wait.
WAIT_FOREVER = None

# LEASE_IDs are UUID4 strings, the form awsflock 0.2.0 printed, so its leases stay usable;
# a pool slot's LEASE_ID adds ".SLOT", so renew and release need nothing else.
_LEASE_ID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?:\.(\d{1,3}))?"
)
#: Most slots a pool may have (its item holds every slot; DynamoDB items stop at 400 KB).
MAX_SLOTS = 100


def check_lease_id(lease_id: str) -> str:
    text = lease_id.strip().lower()
    if not _LEASE_ID.fullmatch(text):
        raise errors.UsageError(
            f"{lease_id!r} is not a LEASE_ID",
            hint="pass the value `awsflock acquire` printed (a UUID like 1b4e28ba-2fa1-...)",
        )
    return text


def slot_of(lease_id: str) -> int | None:
    """The pool slot a LEASE_ID belongs to (None for a plain lock)."""
    match = _LEASE_ID.fullmatch(lease_id)
    return int(match.group(1)) if match and match.group(1) is not None else None


def check_slots(lock_id: str, slots: int | None) -> int | None:
    """The pool size to use: None for a plain lock (no --slots, or --slots 1)."""
    if slots is None:
        return None
    if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= MAX_SLOTS:
        raise errors.UsageError(
            f"--slots must be between 1 and {MAX_SLOTS}, got {slots!r}",
            hint="a pool of N resources takes --slots N",
        )
    return None if slots == 1 else slots


def check_lock_id(lock_id: str) -> str:
    if not lock_id or not lock_id.strip():
        raise errors.UsageError("LOCK_ID is empty", hint="name the lock, e.g. 'deploy-prod'")
    size = len(lock_id.encode("utf-8", "surrogatepass"))
    if size > MAX_LOCK_ID_BYTES:
        raise errors.UsageError(
            f"LOCK_ID is {size} bytes long; DynamoDB allows at most {MAX_LOCK_ID_BYTES}",
            hint="use a shorter name",
        )
    try:
        lock_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise errors.UsageError("LOCK_ID is not valid text", hint="use plain UTF-8") from exc
    if lock_id.startswith(RESERVED_PREFIX):
        raise errors.UsageError(
            f"LOCK_ID may not start with {RESERVED_PREFIX!r}", hint="awsflock keeps it for itself"
        )
    return lock_id


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


@dataclass
class Lease:
    """A lease we hold (or held) on one lock. ``fencing_token`` only ever goes up per lock."""

    table: LockTable
    lock_id: str
    lease_id: str
    fencing_token: int | None
    expires_at: float
    lease_duration: float
    owner: str
    acquired_at: float
    waited: float = 0.0
    reclaimed: LockRecord | None = field(default=None, repr=False)
    released: bool = False
    #: The pool slot this lease holds (None for a plain lock).
    slot: int | None = None

    def renew(self, lease: float | str | None = None) -> Lease:
        """Extend the lease by ``lease`` (default: its current duration) from now."""
        return self.table.renew(self, lease=lease)

    def release(self) -> None:
        """End the lease. Raises NotHeld if it was lost in the meantime."""
        self.table.release(self)

    def remaining(self) -> float:
        return self.expires_at - self.table.clock.time()

    def as_dict(self) -> dict[str, Any]:
        """The public fields, as ``acquire --json`` prints them (lease id included)."""
        return {
            "lock_id": self.lock_id,
            "lease_id": self.lease_id,
            "fencing_token": self.fencing_token,
            "owner": self.owner,
            "acquired_at": round(self.acquired_at, 3),
            "expires_at": round(self.expires_at, 3),
            "lease_duration": self.lease_duration,
            **({} if self.slot is None else {"slot": self.slot}),
        }

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        # Never swallow the caller's exception; a failed release is logged, not raised over it.
        if self.released:
            return
        try:
            self.release()
        except errors.AwsflockError as err:
            if exc[0] is None:
                raise
            log.warning("release of %r failed: %s", self.lock_id, err.one_line())


class LockTable:
    """A DynamoDB lock table. Cheap to make: no AWS client until the first request."""

    def __init__(
        self,
        table_name: str = "awsflock",
        *,
        client: DynamoDBClient | None = None,
        region: str | None = None,
        profile: str | None = None,
        endpoint_url: str | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        skew: float | str = DEFAULT_SKEW,
        owner: str | None = None,
        identity: Identity | None = None,
        store: Store | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.store = store or Store(
            table_name,
            client,
            region=region,
            profile=profile,
            endpoint_url=endpoint_url,
            request_timeout=request_timeout,
            clock=self.clock,
        )
        self.table_name = self.store.table_name
        self.rng = rng or random.Random()
        self.skew = skew_seconds(skew)
        self.identity = identity or Identity.of_this_process(owner)

    def now_ms(self) -> int:
        """Now, by this table's clock, in epoch milliseconds."""
        return _ms(self.clock.time())

    # -- acquire ---------------------------------------------------------------------------

    def acquire(
        self,
        lock_id: str,
        *,
        lease: float | str = DEFAULT_LEASE,
        wait: float | str | None = DEFAULT_WAIT,
        identity: Identity | None = None,
        slots: int | None = None,
        cancel: threading.Event | None = None,
    ) -> Lease:
        """Take the lock, waiting up to ``wait`` seconds (0: don't wait; ``WAIT_FOREVER``).

        With ``slots=N`` (N > 1) the lock is a pool of N slots: up to N holders at once, each
        told its slot (``Lease.slot``). Raises LockBusy (with ``.holder``) when it stayed held,
        and Cancelled (holding nothing) once ``cancel`` is set.
        """
        check_lock_id(lock_id)
        size = check_slots(lock_id, slots)
        lease_s = lease_seconds(lease)
        wait_s = None if wait is None else wait_limit(wait)
        run = Acquisition(self, lock_id, lease_s, identity or self.identity, size)
        deadline = None if wait_s is None else run.start + wait_s
        # The whole acquire, clean-up included, ends within the wait plus one request timeout.
        run.hard_end = None if deadline is None else deadline + self.store.request_timeout
        try:
            while True:
                _check_cancel(cancel, "while waiting")
                got = run.step()
                if got is not None:
                    run.abandon(keep=got.lease_id)
                    if cancel is not None and cancel.is_set():
                        run.give_back(got)
                        _check_cancel(cancel, "just as the lock was granted")
                    return got
                if run.wants_retry_now():
                    continue
                if run.error is None and not run.told:
                    run.told = True
                    self._log_contended(lock_id, run.holder, wait_s, size)
                pause = self._next_pause(run.holder, deadline)
                if pause is None:
                    break
                if run.error is not None:
                    self._log_retry(lock_id, run)
                if cancel is not None:
                    if self.clock.wait(cancel, pause):
                        continue  # checked at the top of the loop
                else:
                    self.clock.sleep(pause)
        except BaseException:
            run.abandon()
            raise
        run.abandon()
        if run.error is not None:
            raise run.error
        waited = self.clock.monotonic() - run.start
        holder = run.holder
        desc = holder.describe(self.clock.time()) if holder else "another lease"
        what = (
            f"all {size} slots of pool {lock_id!r} are held; the next to free up"
            if size
            else (f"lock {lock_id!r}")
        )
        raise errors.LockBusy(
            f"{what} is held by {desc}"
            + (f"; gave up after {format_seconds(waited)}" if waited >= 1 else ""),
            holder=holder,
        )

    def _log_retry(self, lock_id: str, run: Acquisition) -> None:
        assert run.error is not None
        # A grant given back for arriving late is said at INFO: the wait goes on, and it is
        # an error only if the wait ends on it. Other errors: a warning the first time.
        if run.late_grant:
            level = logging.INFO
        else:
            level = logging.DEBUG if run.warned else logging.WARNING
            run.warned = True
        log.log(
            level,
            "acquire of %r: %s; still trying",
            lock_id,
            run.error.one_line(),
            extra={
                "event": "acquire_error",
                "lock_id": lock_id,
                "error": type(run.error).__name__,
            },
        )

    def _log_contended(
        self, lock_id: str, holder: LockRecord | None, wait_s: float | None, pool: int | None
    ) -> None:
        plan = (
            "waiting forever"
            if wait_s is None
            else f"waiting up to {format_seconds(wait_s)}"
            if wait_s > 0
            else "not waiting"
        )
        what = (
            f"all {pool} slots of pool {lock_id!r} are held; the next to free up by"
            if pool
            else (f"lock {lock_id!r} is held by")
        )
        log.info(
            "%s %s; %s",
            what,
            holder.describe(self.clock.time()) if holder else "another lease",
            plan,
            extra=self._event("contended", lock_id, holder),
        )

    def _next_pause(self, holder: LockRecord | None, deadline: float | None) -> float | None:
        """How long to sleep before the next try, or None to give up now."""
        pause = POLL_INTERVAL * (1 + self.rng.uniform(-POLL_JITTER, POLL_JITTER))
        if holder is not None and not holder.released:
            # Wake no later than the moment the holder's lease can be reclaimed.
            reclaim_in = holder.expires_at + self.skew - self.clock.time() + 0.05
            if reclaim_in > 0:
                pause = min(pause, reclaim_in)
        if deadline is not None:
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return None
            # The last try happens at the deadline, never before it.
            pause = min(pause, left)
        return max(pause, 0.0)

    def _granted(
        self,
        lock_id: str,
        lease_id: str,
        record: LockRecord,
        attempts: int,
        slot: int | None,
        waited: float,
    ) -> Lease:
        # The lease it replaced ran out and was taken over (not released, not forced).
        reclaimed = record if record.history and not record.history[0][1] else None
        lease = self._lease_from(
            record,
            lock_id,
            lease_id,
            waited=waited,
            reclaimed=reclaimed,
            slot=slot,
        )
        if reclaimed is not None:
            log.info(
                "reclaimed %r from an expired lease",
                lock_id,
                extra=self._event("reclaimed_expired", lock_id, record),
            )
        log.info(
            "acquired %r (fencing token %s) after %s and %d request(s)",
            lock_id,
            lease.fencing_token,
            format_seconds(waited),
            attempts,
            extra={
                **self._event("acquired", lock_id, record),
                "waited_s": round(waited, 3),
                "attempts": attempts,
                "slot": slot,
                "expires_in_s": round(record.expires_at - self.clock.time(), 3),
            },
        )
        return lease

    def _event(self, name: str, lock_id: str, record: LockRecord | None) -> dict[str, Any]:
        """Fields of a log event (the JSON format drops lease_id unless at debug level)."""
        data: dict[str, Any] = {"event": name, "lock_id": lock_id}
        if record is not None:
            data["owner"] = record.owner
            data["fencing_token"] = record.fencing_token
            data["lease_id"] = record.lease_id
            if slot_of(record.lease_id) is not None:
                data["slot"] = slot_of(record.lease_id)
        return data

    def hold(
        self,
        lock_id: str,
        *,
        lease: float | str = 60.0,
        wait: float | str | None = DEFAULT_WAIT,
        renew_every: float | None = None,
        margin: float | None = None,
        on_lost: LostCallback | None = None,
        identity: Identity | None = None,
        slots: int | None = None,
        cancel: threading.Event | None = None,
    ) -> Hold:
        """A lock held while you work, renewed every lease/3 in the background.

        ``with table.hold("x", lease=60) as held: ... held.check()``. Acquires on entry
        (waiting up to ``wait``), releases on exit, raises LeaseLost on exit if it was lost.
        """
        from awsflock.heartbeat import Hold

        return Hold(
            self,
            lock_id,
            lease=lease,
            wait=wait,
            renew_every=renew_every,
            margin=margin,
            on_lost=on_lost,
            identity=identity,
            slots=slots,
            cancel=cancel,
        )

    # -- renew and release -----------------------------------------------------------------

    def renew(self, held: Lease, *, lease: float | str | None = None) -> Lease:
        """Extend ``held`` from now (by its own duration unless ``lease`` is given), in place."""
        fresh = self.renew_lease(
            held.lock_id, held.lease_id, lease=held.lease_duration if lease is None else lease
        )
        held.expires_at = fresh.expires_at
        held.lease_duration = fresh.lease_duration
        return held

    def release(self, held: Lease) -> None:
        """End ``held``."""
        self.release_lease(held.lock_id, held.lease_id)
        held.released = True

    def renew_lease(
        self, lock_id: str, lease_id: str, *, lease: float | str = DEFAULT_LEASE
    ) -> Lease:
        """Extend the lease ``lease_id`` on ``lock_id`` from now. Raises NotHeld if it is not
        ours any more: released, force-released, expired, or taken by another."""
        check_lock_id(lock_id)
        lease_id = check_lease_id(lease_id)
        lease_s = lease_seconds(lease)
        slot = slot_of(lease_id)
        outcome = self.store.renew(
            lock_id,
            lease_id,
            now_ms=self.now_ms(),
            lease_ms=_ms(lease_s),
            skew_ms=_ms(self.skew),
            slot=slot,
        )
        record = outcome.record
        if not outcome.applied or record is None:
            refused = _verdict(outcome, lock_id, lease_id, "renew", self.clock.time())
            raise refused or errors.NotHeld(f"lease {lease_id} on {lock_id!r} was not renewed")
        log.info(
            "renewed %r for %s",
            lock_id,
            format_seconds(lease_s),
            extra={
                **self._event("renewed", lock_id, record),
                "expires_in_s": round(record.expires_at - self.clock.time(), 3),
            },
        )
        return self._lease_from(record, lock_id, lease_id, slot=slot)

    def _lease_from(self, record: LockRecord, lock_id: str, lease_id: str, **extra: Any) -> Lease:
        """A Lease as the item (just written) describes it."""
        return Lease(
            table=self,
            lock_id=lock_id,
            lease_id=lease_id,
            fencing_token=record.fencing_token,
            expires_at=record.expires_at,
            lease_duration=record.lease_duration,
            owner=record.owner,
            acquired_at=record.acquired_at or self.clock.time(),
            **extra,
        )

    def release_lease(self, lock_id: str, lease_id: str) -> None:
        """End the lease ``lease_id`` on ``lock_id``. Raises NotHeld if it is not ours; a release
        whose first try went through (or a second release) succeeds."""
        check_lock_id(lock_id)
        lease_id = check_lease_id(lease_id)
        outcome = self.store.release(
            lock_id,
            lease_id,
            now_ms=self.now_ms(),
            skew_ms=_ms(self.skew),
            slot=slot_of(lease_id),
        )
        record = outcome.record
        if not outcome.applied:
            verdict = _verdict(outcome, lock_id, lease_id, "release", self.clock.time())
            if outcome.lock is None and self.store.earlier_try_may_have_applied():
                # An earlier try of this release landed unanswered, and the ended item has
                # since been deleted by TTL: the release happened.
                verdict = None
            if verdict is not None:
                raise verdict
        event = self._event("released", lock_id, record)
        if record is not None and record.acquired_at is not None and outcome.applied:
            event["held_s"] = round(self.clock.time() - record.acquired_at, 3)
        log.info("released %r", lock_id, extra=event)


def _check_cancel(cancel: threading.Event | None, when: str) -> None:
    if cancel is not None and cancel.is_set():
        raise errors.Cancelled(f"stopped {when}; nothing is held", hint="")


def _verdict(
    outcome: Outcome, lock_id: str, lease_id: str, operation: str, now: float
) -> errors.NotHeld | None:
    """Why a renew or release of ``lease_id`` was refused (NotHeld naming who, when and why),
    or None for a release that had in fact happened (a retry whose first try went through)."""
    record = outcome.record
    again = "acquire the lock again"

    def refused(why: str, hint: str = again) -> errors.NotHeld:
        return errors.NotHeld(f"lease {lease_id} does not hold {lock_id!r}: {why}", hint=hint)

    if outcome.lock is None:
        return refused(
            "there is no such lock (never taken, or ended and since deleted by TTL)",
            hint="check the lock name and --tablename",
        )
    slot = slot_of(lease_id)
    if slot is None and outcome.pool is not None:
        # A plain lease on an item that has become a pool: the plain lock's last state is
        # still at the top of the item (a release retried after the conversion was done).
        mine = _ended_how(outcome.lock, lease_id)
        if operation == "release" and mine == ENDED_RELEASED:
            return None
        return refused(f"{lock_id!r} is now a pool of {outcome.pool.size} slots")
    if slot is not None and outcome.pool is None:
        return refused(f"{lock_id!r} is a plain lock")
    if record is None:
        return refused("that slot of the pool is unused")
    current = record.lease_id == lease_id
    end = _ended_how(record, lease_id)
    if end == ENDED_RELEASED:
        return None if operation == "release" else refused("it was released")
    if end is not None and end.startswith(ENDED_FORCED):
        detail = record.forced_text() if current else "force-released (see `awsflock audit`)"
        return refused(f"it was {detail}")
    if current and operation == "renew":
        size = record.slots
        if slot is not None and size is not None and slot >= size:
            return refused(f"slot {slot} no longer exists (the pool was resized to {size})")
        if record.expires_at <= now:
            return refused(
                f"it expired {format_seconds(now - record.expires_at)} ago, and a renew never "
                "revives an expired lease"
            )
    if current:
        return refused("it is no longer held")
    holder = f"now held by {record.describe(now)}" if not record.released else "it is free now"
    if end == "":
        return refused(f"it expired and was taken over; {holder}")
    return refused(f"it was released, or expired and taken over; {holder}")


def _ended_how(record: LockRecord, lease_id: str) -> str | None:
    """How ``lease_id`` ended by this record: "" (ran out and was taken over), "released",
    "forced:ID", or None if the record does not know the lease."""
    if record.lease_id == lease_id:
        return record.ended
    return next((end for lease, end in record.history if lease == lease_id), None)
