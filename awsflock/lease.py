"""The lease logic: acquire with prompt, cheap waiting; renew; release. Speaks to a ``Store``."""

from __future__ import annotations

import logging
import random
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from awsflock import errors
from awsflock.clock import Clock, SystemClock
from awsflock.durations import format_seconds, lease_seconds, skew_seconds, wait_seconds
from awsflock.items import Pool, pool_key
from awsflock.records import RESERVED_PREFIX, Identity, LockRecord
from awsflock.store import Store

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from awsflock.heartbeat import Hold, LostCallback

log = logging.getLogger("awsflock.lease")

#: DynamoDB allows partition keys of up to 2048 bytes (UTF-8).
MAX_LOCK_ID_BYTES = 2048
#: A waiter polls about once a second (jittered), so it sees a release within about a second.
POLL_INTERVAL = 1.0
POLL_JITTER = 0.25
DEFAULT_SKEW = 5.0
DEFAULT_LEASE = 2 * 3600.0  # awsflock 0.2.0's default for acquire and renew
DEFAULT_WAIT = 60.0

# LEASE_IDs are UUID4 strings, the form awsflock 0.2.0 printed, so its leases stay usable;
# a pool slot's LEASE_ID adds ".SLOT", so renew and release need nothing else.
_LEASE_ID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?:\.(\d{1,3}))?"
)
#: Most slots a pool may have (its item holds every slot; DynamoDB items stop at 400 KB).
MAX_SLOTS = 100


def new_lease_id() -> str:
    """An unguessable LEASE_ID: uuid4 takes its 122 random bits from os.urandom."""
    return str(uuid.uuid4())


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
    if slots is None or slots == 1:
        return None
    if not isinstance(slots, int) or slots < 1 or slots > MAX_SLOTS:
        raise errors.UsageError(
            f"--slots must be between 1 and {MAX_SLOTS}, got {slots!r}",
            hint="a pool of N resources takes --slots N",
        )
    size = len(pool_key(lock_id).encode("utf-8"))
    if size > MAX_LOCK_ID_BYTES:
        raise errors.UsageError(
            f"pool name is too long ({size} bytes with awsflock's prefix; at most "
            f"{MAX_LOCK_ID_BYTES})",
            hint="use a shorter name",
        )
    return slots


def _soonest(state: Pool) -> LockRecord | None:
    """The held slot whose lease ends first (the one to wait for)."""
    held = [r for r in state.slots.values() if not r.released]
    return min(held, key=lambda r: r.expires_at) if held else None


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
    ) -> None:
        self.store = store or Store(
            table_name, client, region=region, profile=profile, endpoint_url=endpoint_url
        )
        self.table_name = self.store.table_name
        self.clock: Clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.skew = skew_seconds(skew)
        self.identity = identity or Identity.of_this_process(owner)

    def _now_ms(self) -> int:
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
    ) -> Lease:
        """Take the lock, waiting up to ``wait`` seconds (0: don't wait; None: forever).

        With ``slots=N`` (N > 1) the lock is a pool of N slots: up to N holders at once, each
        told its slot (``Lease.slot``). Raises LockBusy (with ``.holder``) when it stayed held.
        """
        check_lock_id(lock_id)
        pool = check_slots(lock_id, slots)
        lease_s = lease_seconds(lease)
        if wait is None:
            wait_s: float | None = None
        elif isinstance(wait, (int, float)) and wait == 0:
            wait_s = 0.0
        else:
            wait_s = wait_seconds(wait)  # "0" as text means forever, as on the command line
        who = identity or self.identity
        base = new_lease_id()
        start = self.clock.monotonic()
        deadline = None if wait_s is None else start + wait_s
        attempts = errors_seen = 0
        uncertain: set[int | None] = set()  # tries that may have been granted unheard
        last_error: errors.AwsflockError | None = None
        holder: LockRecord | None = None
        slot = self.rng.randrange(pool) if pool else None
        quick_tries = 0  # pool probes in a row without sleeping
        try:
            while True:
                attempts += 1
                lease_id = base if slot is None else f"{base}.{slot}"
                log.debug(
                    "acquire attempt %d on %r%s",
                    attempts,
                    lock_id,
                    "" if slot is None else f" slot {slot}",
                    extra={
                        "event": "acquire_attempt",
                        "lock_id": lock_id,
                        "attempts": attempts,
                        "slot": slot,
                    },
                )
                result = None
                try:
                    uncertain.add(slot)
                    result = self.store.try_acquire(
                        lock_id,
                        lease_id=lease_id,
                        identity=who,
                        now_ms=self._now_ms(),
                        lease_ms=_ms(lease_s),
                        skew_ms=_ms(self.skew),
                        slot=slot,
                        slots=pool,
                    )
                    uncertain.discard(slot)
                    last_error = None
                except (errors.Throttled, errors.EndpointUnreachable) as err:
                    # Transient: keep trying within the caller's wait; the outcome is unknown.
                    last_error = err
                if result is not None:
                    record = result.record
                    if result.granted or (record is not None and record.lease_id == lease_id):
                        # Granted now, or granted by an earlier try whose answer was lost.
                        assert record is not None
                        return self._granted(lock_id, lease_id, record, start, attempts, slot)
                    holder = record
                    if result.pool is not None:
                        assert pool is not None
                        mine = self._pool_check(result.pool, pool, base)
                        if mine is not None:
                            got, rec = mine
                            return self._granted(lock_id, rec.lease_id, rec, start, attempts, got)
                        holder = _soonest(result.pool)
                        free = result.pool.free_slots(pool, self.clock.time(), self.skew)
                        if free and quick_tries < pool:
                            quick_tries += 1
                            slot = self.rng.choice(free)
                            continue
                    if attempts == 1 or quick_tries:
                        self._log_contended(lock_id, holder, wait_s, pool)
                pause = self._next_pause(holder, deadline)
                if pause is None:
                    break
                if last_error is not None:
                    errors_seen += 1
                    log.log(
                        logging.WARNING if errors_seen == 1 else logging.DEBUG,
                        "acquire of %r: %s; still trying",
                        lock_id,
                        last_error.one_line(),
                        extra={
                            "event": "acquire_error",
                            "lock_id": lock_id,
                            "error": type(last_error).__name__,
                        },
                    )
                self.clock.sleep(pause)
                quick_tries = 0
                if pool:
                    slot = self.rng.randrange(pool)
        except BaseException:
            self._abandon(lock_id, base, uncertain)
            raise
        self._abandon(lock_id, base, uncertain)
        if last_error is not None:
            raise last_error
        waited = self.clock.monotonic() - start
        now = self.clock.time()
        desc = holder.describe(now) if holder else "another lease"
        what = (
            f"all {pool} slots of pool {lock_id!r} are held; the next to free up"
            if pool
            else (f"lock {lock_id!r}")
        )
        raise errors.LockBusy(
            f"{what} is held by {desc}"
            + (f"; gave up after {format_seconds(waited)}" if waited >= 1 else ""),
            holder=holder,
        )

    def _pool_check(self, state: Pool, size: int, base: str) -> tuple[int, LockRecord] | None:
        """Refuse a pool size mismatch; find a slot granted to us by a try whose answer was
        lost."""
        if state.size is not None and state.size != size:
            raise errors.ConfigurationError(
                f"pool {state.lock_id!r} has {state.size} slots, but this holder asked for {size}",
                hint=f"use --slots {state.size}, or resize the pool (awsflock pool-resize)",
            )
        for number, record in state.slots.items():
            if record.lease_id.startswith(base + ".") and not record.released:
                return number, record
        return None

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
        start: float,
        attempts: int,
        slot: int | None = None,
    ) -> Lease:
        waited = self.clock.monotonic() - start
        reclaimed = None
        prev = record.extra.get("prev_lease_id")
        if prev and not record.prev_released:
            reclaimed = record
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

    def _abandon(self, lock_id: str, base: str, slots: set[int | None]) -> None:
        """Best effort: release leases that may have been granted without our knowing."""
        for slot in slots:
            lease_id = base if slot is None else f"{base}.{slot}"
            try:
                self.store.release(
                    lock_id, lease_id, now_ms=self._now_ms(), skew_ms=_ms(self.skew), slot=slot
                )
            except errors.AwsflockError as err:
                log.debug("clean-up release of %r failed: %s", lock_id, err.one_line())

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
        """Extend the lease ``lease_id`` on ``lock_id`` from now. Raises NotHeld if not ours."""
        check_lock_id(lock_id)
        lease_id = check_lease_id(lease_id)
        lease_s = lease_seconds(lease)
        slot = slot_of(lease_id)
        record = self.store.renew(
            lock_id, lease_id, now_ms=self._now_ms(), lease_ms=_ms(lease_s), slot=slot
        )
        if record is None:
            raise errors.NotHeld(
                f"lease {lease_id} does not hold lock {lock_id!r} (released, or expired and "
                "taken by another)",
                hint="acquire the lock again",
            )
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
        """End the lease ``lease_id`` on ``lock_id``. Raises NotHeld if it is not ours."""
        check_lock_id(lock_id)
        lease_id = check_lease_id(lease_id)
        done, record = self.store.release(
            lock_id,
            lease_id,
            now_ms=self._now_ms(),
            skew_ms=_ms(self.skew),
            slot=slot_of(lease_id),
        )
        if not done:
            raise errors.NotHeld(
                f"lease {lease_id} does not hold lock {lock_id!r}"
                + (
                    f" (now held by {record.describe(self.clock.time())})"
                    if record is not None and record.lease_id and not record.released
                    else ""
                ),
                hint="nothing to release",
            )
        event = self._event("released", lock_id, record)
        if record is not None and record.acquired_at is not None:
            event["held_s"] = round(self.clock.time() - record.acquired_at, 3)
        log.info("released %r", lock_id, extra=event)
