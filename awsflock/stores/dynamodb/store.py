"""A lock table in DynamoDB: the ``LockStore`` whose every step is one conditional UpdateItem.

With ``items`` (the item layout), ``expressions`` (the conditions), ``translate`` (errors),
``client`` and ``tables`` (table administration), this sub-package is the only code that speaks
DynamoDB. A failed write learns the item's state from the same request
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``), or from one consistent read where the
endpoint ignores that parameter.

Each call is retried here (botocore makes one try), with jittered backoff, within the caller's
budget; each try runs in a worker thread bounded in real time, so an answer that trickles in
cannot outlast the budget.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import threading
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from awsflock import errors
from awsflock.clock import Clock, SystemClock
from awsflock.protocol import (
    AUDIT_PREFIX,
    AUDIT_VOID,
    DEFAULT_REQUEST_TIMEOUT,
    KEPT_UNTIL,
    LINE_LAPSE_MS,
    MAX_DROPS,
    Attempt,
    Drops,
    Outcome,
)
from awsflock.records import (
    ENDED_FORCED,
    ENDED_RELEASED,
    RESERVED_PREFIX,
    LockRecord,
    Pool,
    Waiter,
    holder_fields,
)
from awsflock.stores.dynamodb import expressions
from awsflock.stores.dynamodb.client import caller_identity, make_client
from awsflock.stores.dynamodb.items import (
    A_CI_URL,
    A_COMMAND,
    A_FENCE,
    A_HOST,
    A_KIND,
    A_LOCK_ID,
    A_PID,
    A_RENEWED_MS,
    A_USER,
    HISTORY,
    KIND_FENCE,
    POLLED,
    TICKET,
    fence_key,
    from_attr,
    is_pool_item,
    line_from_item,
    place_entry,
    pool_from_item,
    record_from_item,
    slot_prefix,
    to_attr,
)
from awsflock.stores.dynamodb.translate import (
    KEY_REFUSAL,
    TABLE_HINT,
    key_problem,
    may_have_applied,
    not_awsflock_table,
    translate_errors,
)
from awsflock.stores.retrying import RetryingStore

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

_NAME = re.compile(r"#(\w+)")
_VALUE = re.compile(r":(\w+)")

#: A try whose answer has not fully arrived this long after its timeout is given up.
TRY_GRACE = 0.25
_T = TypeVar("_T")


def _request(*expressions: str, values: dict[str, Any]) -> dict[str, Any]:
    """ExpressionAttributeNames/Values holding exactly what the expressions use.

    DynamoDB rejects unused names or values, so they are derived from the expressions; a
    placeholder ``#x`` always names the attribute ``x``.
    """
    text = " ".join(expressions)
    used_names = sorted(set(_NAME.findall(text)))
    used_values = sorted(set(_VALUE.findall(text)))
    return {
        "ExpressionAttributeNames": {f"#{n}": n for n in used_names},
        "ExpressionAttributeValues": {f":{k}": to_attr(values[k]) for k in used_values},
    }


def expiration_seconds(ms: int) -> int:
    """Whole epoch seconds at or after ``ms`` (the TTL attribute is never early)."""
    return math.ceil(ms / 1000)


def new_version() -> str:
    """A fresh value for ``lease_id``: awsflock 0.2.0's compare-and-swap changes with it."""
    return str(uuid.uuid4())


class DynamoDBStore(RetryingStore):
    """A lock table in DynamoDB (a ``LockStore``). Builds its botocore client on first use."""

    #: Leases are timed by the callers' clocks (see ``LockStore.skew_free``).
    skew_free = False

    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient | None = None,
        *,
        region: str | None = None,
        profile: str | None = None,
        endpoint_url: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        clock: Clock | None = None,
    ) -> None:
        if not table_name:
            raise errors.UsageError("table name is empty", hint="pass --tablename NAME")
        self.table_name = table_name
        self.region = region
        self.profile = profile
        self.endpoint_url = endpoint_url
        self.request_timeout = request_timeout
        self.clock: Clock = clock or SystemClock()
        self._client = client
        self._local = threading.local()  # this thread's budget and per-try timeout
        # None until we learn whether a failed conditional write returns the old item.
        self._ccf_returns_item: bool | None = None
        #: The latest poll of each lock's line that an answer showed (see ``beat``).
        self._polled: dict[str, int] = {}
        #: The highest fencing token an answer showed per lock (see ``_take_plain``).
        self._fences: dict[str, int] = {}
        #: Whether the endpoint runs transactions (until it answers that it does not: dynalite).
        self._transactions = True

    # -- client -------------------------------------------------------------------------------

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            # Building the client reads the AWS config and resolves credentials: its errors
            # (a bad endpoint URL, an unparsable config file, a failing credential_process)
            # are translated like every request's.
            with self.translate_errors("connect"):
                client = make_client(
                    profile=self.profile,
                    region=self.region,
                    endpoint_url=self.endpoint_url,
                    request_timeout=self.request_timeout,
                )
            # Each try's read timeout is what is left of the caller's budget (botocore reads
            # it from the request context; versions without that use the client's default).
            client.meta.events.register("before-call.dynamodb", self._set_try_timeout)
            self._client = client
        return self._client

    def _set_try_timeout(self, context: dict[str, Any], **_: Any) -> None:
        timeout = getattr(self._local, "try_timeout", None)
        if timeout is not None:
            context["read_timeout"] = timeout

    def translate_errors(self, operation: str) -> contextlib.AbstractContextManager[None]:
        """botocore's exceptions raised inside, as awsflock's (see ``translate``)."""
        return translate_errors(
            operation,
            table=self.table_name,
            where=self._where(),
            profile=self.profile,
            region=self.region,
            endpoint_url=self.endpoint_url,
            foreign=self._foreign_table,
        )

    def actor(self) -> str | None:
        """The AWS caller's ARN, or None where it cannot be learned (local endpoints, errors)."""
        return caller_identity(
            profile=self.profile, region=self.region, endpoint_url=self.endpoint_url
        )

    def create(
        self,
        *,
        progress: Callable[[str], None] = lambda _message: None,
        billing_mode: str = "PAY_PER_REQUEST",
        capacity: tuple[int, int] = (5, 5),
    ) -> bool:
        """Create the table (or accept a compatible one), wait until ACTIVE, enable TTL."""
        from awsflock.stores.dynamodb.tables import create_table

        return create_table(
            self.client,
            self.table_name,
            self.translate_errors,
            billing_mode=billing_mode,
            capacity=capacity,
            progress=progress,
        )

    # -- requests ------------------------------------------------------------------------------

    def _attempt(self, operation: str, call: Callable[[], _T], timeout: float) -> _T:
        with self.translate_errors(operation):
            return self._try(call, timeout)

    def _try_may_have_applied(self, err: errors.StoreError) -> bool:
        return may_have_applied(err.__cause__)

    def _try(self, call: Callable[[], _T], timeout: float) -> _T:
        """One try, in a worker thread given ``timeout`` (plus a grace) of real time: botocore's
        timeouts bound each socket operation, not an answer that trickles in byte by byte or a
        connect that hangs. A try still running then is given up (it may yet land)."""
        box: dict[str, Any] = {}

        def work() -> None:
            self._local.try_timeout = timeout
            try:
                box["value"] = call()
            except BaseException as exc:  # handed to the caller's thread as is
                box["error"] = exc

        worker = threading.Thread(target=work, name="awsflock-request", daemon=True)
        worker.start()
        worker.join(timeout + TRY_GRACE)
        if worker.is_alive():
            raise errors.EndpointUnreachable(
                f"DynamoDB at {self._where()} did not answer in time",
                hint="check the network and retry",
            )
        if "error" in box:
            raise box["error"]
        value: _T = box["value"]
        return value

    # -- errors -------------------------------------------------------------------------------

    def where(self) -> str:
        """The endpoint, for messages: "DynamoDB at ..."."""
        return f"DynamoDB at {self._where()}"

    def _where(self) -> str:
        if self.endpoint_url:
            return self.endpoint_url
        return f"region {self.region}" if self.region else "the default endpoint"

    def _foreign_table(self, refusal: str = "") -> errors.TableIncompatible | None:
        """After DynamoDB refused a request's key: the error naming the table's own key if it
        is not awsflock's, else None. One DescribeTable."""
        try:
            table = self.client.describe_table(TableName=self.table_name)["Table"]
        except Exception:  # denied or failing: judge by the refusal alone
            if not KEY_REFUSAL.search(refusal):
                return None
            return errors.TableIncompatible(
                f"table {self.table_name!r} is not an awsflock table: its key is not "
                f"{A_LOCK_ID}, a string ({refusal})",
                hint=TABLE_HINT,
            )
        key = key_problem(dict(table))
        return None if key is None else not_awsflock_table(self.table_name, key)

    def check_table(self) -> None:
        """One DescribeTable: raise TableMissing, or TableIncompatible if the table's key is
        not awsflock's. Skipped where DescribeTable is denied (scans then check the items)."""
        try:
            table = self._send(
                "describe_table",
                lambda: self.client.describe_table(TableName=self.table_name)["Table"],
            )
        except errors.AccessDenied:
            return
        key = key_problem(dict(table))
        if key is not None:
            raise not_awsflock_table(self.table_name, key)

    # -- lock operations ----------------------------------------------------------------------

    def take(self, lock_id: str, attempt: Attempt) -> Outcome:
        """Take the lock (or the attempt's slot of its pool) if it is free (see ``LockStore``).
        One step of up to five calls: a doubt from any of them stays with the answer."""
        with self.step():
            return self._take(lock_id, attempt)

    def _take(self, lock_id: str, attempt: Attempt) -> Outcome:
        identity, now_ms, skew_ms = attempt.identity, attempt.now_ms, attempt.skew_ms
        lease_ms, slot, slots = attempt.lease_ms, attempt.slot, attempt.slots
        expires_ms = now_ms + lease_ms
        values: dict[str, Any] = {
            "lease": attempt.lease_id,
            "version": new_version(),
            "owner": identity.owner,
            "lease_duration": _seconds_number(lease_ms),
            "ttl": expiration_seconds(expires_ms + skew_ms),
            "expires_ms": expires_ms,
            "now_ms": now_ms,
            "floor": now_ms * 1000,
            "one": 1,
            "null": None,
            "cutoff_ms": now_ms - skew_ms,
            "cutoff_s": (now_ms - skew_ms) // 1000,
            "token": None,  # a plain take's own (see _take_plain)
            "seen": None,
            "slots": slots,
            "zero": 0,
            "qcut": now_ms - LINE_LAPSE_MS - skew_ms,
        }
        line_sets = None
        if attempt.ticket is None:
            line = expressions.LINE_CLEAR
        else:
            _check_tickets(attempt.ticket, attempt.drop)
            line = expressions.in_line(attempt.ticket, attempt.drop)
            line_sets = expressions.leave_line([attempt.ticket, *(t for t, _ in attempt.drop)])
            values["gone"] = 1 + len(attempt.drop)
            values.update(_drop_values(attempt.drop))
        # Who holds it, for waiters' messages; absent fields are removed so that a previous
        # holder's value never lingers.
        holder = {
            A_HOST: identity.host,
            A_PID: identity.pid,
            A_USER: identity.user,
            A_CI_URL: identity.ci_url,
            A_COMMAND: identity.command,
        }
        sets, removes = [], []
        for name, value in holder.items():
            if value in ("", 0, None):
                removes.append(name)
            else:
                sets.append(name)
                values[name] = value
        p = slot_prefix(slot)
        update = expressions.acquire_update(p, sets, removes, line_sets)
        if slot is None:
            kept = expressions.acquire_update(p, sets, removes, line_sets, kept=True)
            values["kept_until"] = KEPT_UNTIL
            return self._take_plain(lock_id, attempt, (update, kept), line, values)
        becomes = expressions.acquire_update(p, sets, removes, line_sets, plain_top=True)
        return self._take_slot(lock_id, attempt, (update, becomes), line, values, slot)

    def _take_slot(
        self,
        lock_id: str,
        attempt: Attempt,
        updates: tuple[str, str],
        line: str,
        values: dict[str, Any],
        slot: int,
    ) -> Outcome:
        """A pool slot's take. On an item that is a pool already, one UpdateItem: a pool's item
        is never deleted and its plain lock's token stays as it was, so a new slot starting
        above that token (``PLAIN_BELOW``) starts above every plain grant. An item that is not a
        pool yet (absent, or a free plain lock) becomes one in a transaction that also checks
        the fence record: the plain lock's tokens may live only there (its item deleted by TTL
        or by an awsflock 0.2.0 release), and a take that lands late must not start below
        them. A new slot starts above its plain lock's tokens: refused as too low, the take is
        sent again above them."""
        p = slot_prefix(slot)
        now, skew = attempt.now_ms / 1000, attempt.skew_ms / 1000
        update, update_becomes = updates
        pooled = expressions.acquire_condition(p, line, pool=expressions.IS_POOL)
        becomes = expressions.acquire_condition(p, line)
        outcome = self._conditional_update("acquire", lock_id, update, pooled, values, slot)
        fence: int | None = None  # the fence record's token, once a transaction showed it
        sent_floor = None  # the floor of the last transaction
        for _ in range(3):
            if outcome.applied:
                return outcome
            record = outcome.lock
            plain = record.fencing_token if record is not None else None
            if outcome.pool is not None:  # a pool: the slot busy, or its plain token above
                held = outcome.pool.slots.get(slot)
                if held is not None and not held.is_free(now, skew):
                    return outcome
                if plain is None or plain < values["floor"]:
                    return outcome
                values["floor"] = plain + 1  # a new slot starts above its plain lock's tokens
                outcome = self._conditional_update("acquire", lock_id, update, pooled, values, slot)
                continue
            if record is not None and not record.is_free(now, skew):
                return outcome  # a plain lock, held
            # Not a pool (absent, or a free plain lock): it becomes one, above every token the
            # plain lock was granted, its item's and its fence record's.
            values["floor"] = max(values["floor"], (plain or 0) + 1, (fence or 0) + 1)
            if values["floor"] == sent_floor:
                return outcome  # refused as it stands (the line, a lease id seen before)
            values["plain_top"] = values["floor"] - 1
            if not self._transactions:  # dynalite: the item's own token alone
                return self._conditional_update(
                    "acquire", lock_id, update_becomes, becomes, values, slot
                )
            values["token"] = values["floor"]  # the fence record must be below it
            answer = self._fenced_take(lock_id, update_becomes, becomes, values, slot=slot)
            if answer is None:  # the endpoint has no transactions
                self._transactions = False
                continue
            sent_floor = values["floor"]
            outcome, fence = answer
            if outcome.applied:  # a transaction answers nothing: read what it made
                self.applied()  # a failed read must not say that nothing was
                return dataclasses.replace(
                    self._outcome(True, self._get_item(lock_id), lock_id, slot),
                    in_doubt=outcome.in_doubt,
                )
        return outcome

    def _take_plain(
        self,
        lock_id: str,
        attempt: Attempt,
        updates: tuple[str, str],
        line: str,
        values: dict[str, Any],
    ) -> Outcome:
        """A plain lock's take: its token chosen here and checked against the lock's item and
        its fence record in one transaction (see ``expressions``). Two more requests at most:
        one when the last token granted is ahead of ours (a clock behind the last holder's),
        one to reclaim a lease that ran out, which a first try cannot see. ``updates``: the
        take's, and the same keeping the item for good, for an endpoint without transactions
        (no fence record there: the item must outlive TTL and 0.2.0 clients)."""
        now, skew = attempt.now_ms / 1000, attempt.skew_ms / 1000
        update, kept = updates

        def reclaimable(record: LockRecord | None) -> bool:
            """A lease that ran out (not ended) on an item of a known version."""
            return (
                record is not None
                and not record.released
                and bool(record.version)
                and record.is_free(now, skew)
            )

        def variant(record: LockRecord | None) -> str:
            """What a take may replace, as ``record`` shows the lock: the lease that ran out,
            pinned to its version, or nothing but an absent or ended lease."""
            return expressions.RECLAIM_SEEN if reclaimable(record) else expressions.FREE_ENDED

        token = max(attempt.now_ms * 1000, self._fences.get(lock_id, 0)) + 1
        # A waiter whose last answer showed the lease run out reclaims it in one request.
        seen = attempt.seen
        outcome = Outcome(False, None)
        for _ in range(3):
            free = variant(seen) if self._transactions else expressions.FREE_PLAIN
            values["token"] = token
            values["seen"] = seen.version if seen is not None else None
            condition = expressions.acquire_condition("", line, free)
            if not self._transactions:
                outcome = self._conditional_update(
                    "acquire", lock_id, kept, condition, values, None
                )
                fence = None
            else:
                answer = self._fenced_take(lock_id, update, condition, values)
                if answer is None:  # the endpoint has no transactions (dynalite)
                    self._transactions = False
                    continue
                outcome, fence = answer
            if outcome.applied:
                if outcome.lock is None:  # a transaction answers nothing: what it wrote
                    replaced = seen if free is expressions.RECLAIM_SEEN else None
                    outcome = dataclasses.replace(
                        outcome, lock=_granted_record(lock_id, attempt, values, replaced)
                    )
                self._learn_fence(lock_id, token)
                return outcome
            record = outcome.lock if outcome.pool is None else None
            high = max(fence or 0, (record.fencing_token or 0) if record else 0)
            self._learn_fence(lock_id, high)
            free_now = outcome.pool is None and (record is None or record.is_free(now, skew))
            if high >= token and free_now:
                token = high + 1  # granted meanwhile, or a clock ahead of ours
                seen = record if record is not None else seen
                continue
            changed = variant(record) is not free or (
                free is expressions.RECLAIM_SEEN
                and record is not None
                and seen is not None
                and record.version != seen.version
            )
            if self._transactions and free_now and changed:
                seen = record  # the lock changed since what the take was sent for
                continue
            return outcome
        return outcome

    def _fenced_take(
        self,
        lock_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        slot: int | None = None,
    ) -> tuple[Outcome, int | None] | None:
        """One TransactWriteItems: the lock item's take, and the fence record's check that it
        holds no token from ``values["token"]`` up: raised to that token for a plain take,
        only checked for a pool slot's (``slot``; a pool's tokens are its slots'). The outcome
        (its ``lock`` None when applied: a transaction answers nothing) and the fence record's
        token when that refused it; None if the endpoint has no transactions."""
        from botocore.exceptions import ClientError

        fence_values = {"token": values["token"], "fence_kind": KIND_FENCE}
        fence_check: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": {A_LOCK_ID: {"S": fence_key(lock_id)}},
            "ConditionExpression": expressions.FENCE_RECORD_ABOVE,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if slot is None:
            fence_check["UpdateExpression"] = expressions.FENCE_UPDATE
            fence_check.update(
                _request(
                    expressions.FENCE_UPDATE, expressions.FENCE_RECORD_ABOVE, values=fence_values
                )
            )
        else:
            fence_check.update(_request(expressions.FENCE_RECORD_ABOVE, values=fence_values))
        items: list[Any] = [
            {
                "Update": {
                    "TableName": self.table_name,
                    "Key": {A_LOCK_ID: {"S": lock_id}},
                    "UpdateExpression": update,
                    "ConditionExpression": condition,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    **_request(update, condition, values=values),
                }
            },
            {"Update" if slot is None else "ConditionCheck": fence_check},
        ]

        def call() -> tuple[str, dict[str, Any] | None, int | None] | None:
            try:
                self.client.transact_write_items(TransactItems=items)
            except ClientError as exc:
                response: Any = exc.response
                code = response.get("Error", {}).get("Code")
                if code == "UnknownOperationException":
                    return None
                if code == "ValidationException":
                    # Some servers (moto) refuse a transaction on a table keyed otherwise without
                    # saying why; a read of the lock's key says it (translated as such), and
                    # costs a request only on this error.
                    self.client.get_item(TableName=self.table_name, Key=items[0]["Update"]["Key"])
                    raise
                reasons: list[Any] = response.get("CancellationReasons") or []
                codes = [r.get("Code") for r in reasons]
                if (
                    code != "TransactionCanceledException"
                    or len(reasons) != 2
                    or any(c not in ("ConditionalCheckFailed", "None") for c in codes)
                ):
                    raise  # a conflict with another write, or worse: translated, retried
                held = (
                    (reasons[1].get("Item") or {}) if codes[1] == "ConditionalCheckFailed" else {}
                )
                if held and from_attr(held.get(A_KIND, {"S": ""})) != KIND_FENCE:
                    raise errors.ConfigurationError(
                        f"the key {fence_key(lock_id)!r}, which keeps the fencing counter of "
                        f"{lock_id!r}, holds something else (an awsflock 0.2.0 lock of that "
                        "name?): awsflock will not take the lock while it does",
                        hint="release or delete that item (its name starts with awsflock's "
                        "reserved prefix)",
                    ) from exc
                fence = int(from_attr(held[A_FENCE])) if A_FENCE in held else None
                if codes[0] == "ConditionalCheckFailed":
                    return "refused", reasons[0].get("Item"), fence
                return "low", None, fence
            return "applied", None, None

        answer = self._send("acquire", call)
        if answer is None:
            return None
        how, item, fence = answer
        in_doubt = self._in_doubt()
        if how == "applied":
            return Outcome(True, None, in_doubt=in_doubt), None
        if how == "low":
            # Only the fence record refused: the lock's item would have taken it (not read).
            return Outcome(False, None, in_doubt=in_doubt), int(fence or 0)
        outcome = self._after_update("acquire", False, item, lock_id, slot)
        fence_value = None if fence is None else int(fence)
        return (dataclasses.replace(outcome, in_doubt=True) if in_doubt else outcome), fence_value

    def _learn_fence(self, lock_id: str, token: int) -> None:
        """Remember the highest token seen on a lock: this process's next take starts above it."""
        if token > self._fences.get(lock_id, 0):
            self._fences[lock_id] = token

    def join(self, lock_id: str, waiter: Waiter) -> Outcome:
        """Take a place in the lock's line under the next number (see ``LockStore.join``)."""
        _check_tickets(waiter.ticket, ())
        values = {"entry": place_entry(waiter), "now_ms": waiter.seen_ms, "zero": 0, "one": 1}
        return self._raising_polled(
            lock_id,
            waiter.seen_ms,
            lambda raise_polled: self._conditional_update(
                "join",
                lock_id,
                expressions.join_update(waiter.ticket, raise_polled),
                expressions.join_condition(waiter.ticket, raise_polled),
                values,
                None,
            ),
            # Refused though the record is there and we have no place: only the poll was later.
            lambda out: out.lock is not None and out.line.find(waiter.ticket) is None,
        )

    def beat(self, lock_id: str, ticket: str, *, now_ms: int, drop: Drops = ()) -> Outcome:
        """A waiter's poll: its place's last poll is now (see ``LockStore.beat``)."""
        _check_tickets(ticket, drop)
        values: dict[str, Any] = {"now_ms": now_ms, "zero": 0, "gone": len(drop)}
        values.update(_drop_values(drop))

        def only_polled(out: Outcome) -> bool:
            """Refused though our place has an earlier poll and the drops are unchanged."""
            mine = out.line.find(ticket)
            return (
                mine is not None
                and mine.seen_ms < now_ms
                and all(_seen(out, t) == seen for t, seen in drop)
            )

        return self._raising_polled(
            lock_id,
            now_ms,
            lambda raise_polled: self._conditional_update(
                "beat",
                lock_id,
                expressions.beat_update(ticket, drop, raise_polled),
                expressions.beat_condition(ticket, drop, raise_polled),
                values,
                None,
            ),
            only_polled,
        )

    def _raising_polled(
        self,
        lock_id: str,
        now_ms: int,
        send: Callable[[bool], Outcome],
        only_polled: Callable[[Outcome], bool],
    ) -> Outcome:
        """A join or beat that raises the line's latest poll (``qpoll``) to ``now_ms`` and never
        lowers it: sent with ``qpoll < :now_ms`` unless the poll is known to be later already
        (another waiter's clock is ahead of ours), and sent again without when that alone
        (``only_polled``) refused it. So a join or beat that lands late cannot make a live
        line look idle."""

        def sent(raise_polled: bool) -> Outcome:
            outcome = send(raise_polled)
            if outcome.line.polled_ms is not None:
                self._polled[lock_id] = outcome.line.polled_ms
            return outcome

        known = self._polled.get(lock_id)
        if known is not None and known >= now_ms:
            return sent(False)
        outcome = sent(True)
        if not outcome.applied and only_polled(outcome):
            return sent(False)
        return outcome

    def leave(self, lock_id: str, ticket: str) -> Outcome:
        """Remove the ticket's place from the line."""
        _check_tickets(ticket, ())
        sets, removes = expressions.leave_line([ticket])
        return self._conditional_update(
            "leave",
            lock_id,
            f"SET {sets} REMOVE {removes}",
            expressions.in_line(ticket, ()),
            {"zero": 0, "gone": 1},
            None,
        )

    def renew(
        self,
        lock_id: str,
        lease_id: str,
        *,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        slot: int | None = None,
        keeper: str | None = None,
    ) -> Outcome:
        """Extend our lease from ``now_ms``, if it is ours, not ended and not run out."""
        expires_ms = now_ms + lease_ms
        values = {
            "lease": lease_id,
            "version": new_version(),
            "lease_duration": _seconds_number(lease_ms),
            "ttl": expiration_seconds(expires_ms + skew_ms),
            "expires_ms": expires_ms,
            "now_ms": now_ms,
            "now_s": now_ms // 1000,
            "slot": slot,
            "keeper": keeper,
        }
        p = slot_prefix(slot)

        def send() -> Outcome:
            return self._conditional_update(
                "renew",
                lock_id,
                expressions.renew_update(p, keeper is not None),
                expressions.renew_condition(p),
                values,
                slot,
            )

        outcome = send()
        later = _later_reading(outcome, lease_id, now_ms, lease_ms)
        if later is None:
            return outcome
        # Refused only because the lease was granted or renewed with a later reading than ours
        # (another host's renew, or our clock stepped back): sent once more from that reading,
        # which only lengthens the lease (a renew that lands late after it is refused again).
        expires_ms = later + lease_ms
        values.update(
            now_ms=later,
            now_s=later // 1000,
            expires_ms=expires_ms,
            ttl=expiration_seconds(expires_ms + skew_ms),
        )
        return send()

    def release(
        self, lock_id: str, lease_id: str, *, now_ms: int, skew_ms: int, slot: int | None = None
    ) -> Outcome:
        """End our lease, keeping the item (and its fencing counter)."""
        return self._end(
            "release",
            expressions.release_update,
            lock_id,
            lease_id,
            ENDED_RELEASED,
            now_ms=now_ms,
            skew_ms=skew_ms,
            slot=slot,
        )

    def force_release(
        self,
        lock_id: str,
        lease_id: str,
        *,
        force_id: str,
        now_ms: int,
        skew_ms: int,
        actor: str,
        reason: str,
        slot: int | None = None,
    ) -> Outcome:
        """End ``lease_id`` whoever holds it, recording who, why, and this action's id."""
        return self._end(
            "force_release",
            expressions.force_update,
            lock_id,
            lease_id,
            ENDED_FORCED + force_id,
            now_ms=now_ms,
            skew_ms=skew_ms,
            slot=slot,
            actor=actor,
            reason=reason,
        )

    def _end(
        self,
        operation: str,
        update: Callable[[str], str],
        lock_id: str,
        lease_id: str,
        ended: str,
        *,
        now_ms: int,
        skew_ms: int,
        slot: int | None,
        **extra: Any,
    ) -> Outcome:
        """Release and force-release: one write ending the lease, marked ``ended``."""
        values = {
            "lease": lease_id,
            "version": new_version(),
            "ended": ended,
            "now_ms": now_ms,
            "ttl": expiration_seconds(now_ms + skew_ms),
            **extra,
        }
        p = slot_prefix(slot)
        return self._conditional_update(
            operation, lock_id, update(p), expressions.release_condition(p), values, slot
        )

    def resize_pool(
        self, lock_id: str, old: int | None, new: int, *, now_ms: int, skew_ms: int
    ) -> bool:
        """Set a pool's size, only if it is still ``old`` and every slot that goes away is free."""
        condition = expressions.resize_condition(old, new)
        values = {
            "old": old,
            "new": new,
            "cutoff_ms": now_ms - skew_ms,
            "cutoff_s": (now_ms - skew_ms) // 1000,
        }
        outcome = self._conditional_update(
            "resize", lock_id, expressions.RESIZE_UPDATE, condition, values, None
        )
        return outcome.applied

    def put_audit(self, key: str, entry: dict[str, Any], *, replace: bool = True) -> None:
        """Write one audit record under ``key``: replacing one of that key, or (``replace`` is
        False) only if there is none."""
        from botocore.exceptions import ClientError

        item = {A_LOCK_ID: {"S": key}, A_KIND: {"S": "audit"}}
        item.update({k: to_attr(v) for k, v in entry.items() if v not in (None, "")})
        extra: dict[str, Any] = {}
        if not replace:
            extra = {
                "ConditionExpression": "attribute_not_exists(#k)",
                "ExpressionAttributeNames": {"#k": A_LOCK_ID},
            }

        def call() -> None:
            try:
                self.client.put_item(TableName=self.table_name, Item=item, **extra)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise

        self._send("audit", call)

    def void_audit(self, key: str, action_id: str | None) -> None:
        """Mark the audit record ``key`` as describing an action that did not take effect (only
        if written by ``action_id``, when given). UpdateItem, so no DeleteItem is needed."""
        from botocore.exceptions import ClientError

        condition = "attribute_exists(#k)" + ("" if action_id is None else " AND #a = :a")
        values: dict[str, Any] = {":v": {"S": AUDIT_VOID}}
        names = {"#k": A_LOCK_ID, "#s": "status"}
        if action_id is not None:
            names["#a"] = "action_id"
            values[":a"] = {"S": action_id}

        def call() -> None:
            try:
                self.client.update_item(
                    TableName=self.table_name,
                    Key={A_LOCK_ID: {"S": key}},
                    UpdateExpression="SET #s = :v",
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise

        self._send("audit_void", call)

    def audit_entries(self, page_size: int = 500) -> Iterator[dict[str, Any]]:
        """Every audit record's fields, page by page."""
        for item in self._scan(AUDIT_PREFIX, page_size):
            # The key and the kind are this store's layout, not the entry's fields.
            yield {k: from_attr(a) for k, a in item.items() if k not in (A_LOCK_ID, A_KIND)}

    def read(self, lock_id: str) -> Outcome:
        """One strongly consistent read of a lock's item (plain or pool)."""
        return self._outcome(False, self._get_item(lock_id), lock_id, None)

    def _get_item(self, key: str) -> dict[str, Any] | None:
        response = self._send(
            "get",
            lambda: self.client.get_item(
                TableName=self.table_name,
                Key={A_LOCK_ID: {"S": key}},
                ConsistentRead=True,
            ),
        )
        item: dict[str, Any] | None = response.get("Item")
        return item

    @staticmethod
    def _outcome(
        applied: bool, item: dict[str, Any] | None, lock_id: str, slot: int | None
    ) -> Outcome:
        if not item:
            return Outcome(applied, None, None, slot)
        line = line_from_item(item)
        pool = pool_from_item(lock_id, item, line) if is_pool_item(item) else None
        record = dataclasses.replace(record_from_item(item), line=line)
        return Outcome(applied, record, pool, slot, line=line)

    def _conditional_update(
        self,
        operation: str,
        lock_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        slot: int | None,
    ) -> Outcome:
        """Run one conditional UpdateItem on a lock's item; the item as it is afterwards, or as
        it was when the condition failed."""
        from botocore.exceptions import ClientError

        request = _request(update, condition, values=values)

        def call() -> tuple[bool, dict[str, Any] | None]:
            try:
                response = self.client.update_item(
                    TableName=self.table_name,
                    Key={A_LOCK_ID: {"S": lock_id}},
                    UpdateExpression=update,
                    ConditionExpression=condition,
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **request,
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise
                return False, exc.response.get("Item")  # type: ignore[return-value]
            item = dict(response.get("Attributes", {}))
            if A_LOCK_ID not in item:
                # ALL_NEW always holds the key: an answer cut short, or not DynamoDB's. The
                # write may have been applied.
                raise errors.EndpointUnreachable(
                    f"DynamoDB at {self._where()} gave an incomplete answer",
                    hint="check --endpoint-url and the network",
                )
            return True, item

        applied, item = self._send(operation, call)
        in_doubt = self._in_doubt()
        outcome = self._after_update(operation, applied, item, lock_id, slot)
        return dataclasses.replace(outcome, in_doubt=in_doubt) if in_doubt else outcome

    def _after_update(
        self,
        operation: str,
        applied: bool,
        item: dict[str, Any] | None,
        lock_id: str,
        slot: int | None,
    ) -> Outcome:
        if applied:
            return self._outcome(True, item, lock_id, slot)
        if item:
            self._ccf_returns_item = True
            return self._outcome(False, item, lock_id, slot)
        # No old item in the answer: either there is no item, or the endpoint ignores
        # ReturnValuesOnConditionCheckFailure (dynalite 4 does). Only then read it.
        if self._ccf_returns_item:
            return Outcome(False, None, None, slot)
        if operation == "acquire":
            # An acquire fails only on an existing item: this endpoint does not return it on
            # failure, and every later failure needs the read.
            self._ccf_returns_item = False
        return self._outcome(False, self._get_item(lock_id), lock_id, slot)

    # -- table ---------------------------------------------------------------------------------

    def locks(self, prefix: str = "", page_size: int = 500) -> Iterator[LockRecord | Pool]:
        """Every plain lock and pool (not awsflock's other items), page by page."""
        for item in self._scan(prefix, page_size):
            key = item.get(A_LOCK_ID, {}).get("S")
            if key is None:  # only reachable where DescribeTable is denied (see check_table)
                raise errors.TableIncompatible(
                    f"table {self.table_name!r} is not an awsflock table: its items have no "
                    f"{A_LOCK_ID} string",
                    hint=TABLE_HINT,
                )
            if key.startswith(RESERVED_PREFIX):
                continue
            line = line_from_item(item)
            if is_pool_item(item):
                yield pool_from_item(key, item, line)
            else:
                yield dataclasses.replace(record_from_item(item), line=line)

    def _scan(self, prefix: str, page_size: int, **extra: Any) -> Iterator[dict[str, Any]]:
        # A scan of a table keyed otherwise would list nothing (or foreign items), and a prefix
        # filter on lock_id hides them all: check the key first. Scans are not a hot path.
        self.check_table()
        kwargs: dict[str, Any] = {"TableName": self.table_name, "Limit": page_size, **extra}
        if prefix:
            kwargs["FilterExpression"] = "begins_with(#lock_id, :prefix)"
            kwargs["ExpressionAttributeNames"] = {"#lock_id": A_LOCK_ID}
            kwargs["ExpressionAttributeValues"] = {":prefix": {"S": prefix}}
        while True:
            page = self._send("scan", lambda: self.client.scan(**kwargs))
            yield from page.get("Items", [])
            last = page.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last


def _later_reading(outcome: Outcome, lease_id: str, now_ms: int, lease_ms: int) -> int | None:
    """The reading a refused renew should be sent again with: the record's ``renewed_ms``, when
    only that refused it (the lease is ``lease_id``'s, not ended, live at ``now_ms``) and the
    renew from it moves the end no earlier; else None."""
    record = outcome.record
    if outcome.applied or record is None or record.lease_id != lease_id or record.released:
        return None
    renewed = record.extra.get(A_RENEWED_MS)
    if not isinstance(renewed, int) or renewed <= now_ms or record.expires_at * 1000 <= now_ms:
        return None
    return renewed if renewed + lease_ms >= record.expires_at * 1000 else None


def _granted_record(
    lock_id: str, attempt: Attempt, values: dict[str, Any], seen: LockRecord | None
) -> LockRecord:
    """The lock's record as a plain take that a transaction applied wrote it (a transaction
    answers nothing). Its earlier leases are known only when it reclaimed the lease it saw
    (``seen``): a take of an absent or ended lease does not learn them."""
    history = () if seen is None else ((seen.lease_id, ""), *seen.history[: HISTORY - 1])
    return LockRecord(
        lock_id=lock_id,
        lease_id=attempt.lease_id,
        version=str(values["version"]),
        **holder_fields(attempt.identity),
        acquired_at=attempt.now_ms / 1000,
        expires_at=(attempt.now_ms + attempt.lease_ms) / 1000,
        lease_duration=attempt.lease_ms / 1000,
        fencing_token=int(values["token"]),
        history=history,
    )


def _check_tickets(ticket: str, drop: Drops) -> None:
    """Tickets become parts of attribute names: only the library's own form is accepted, and
    at most MAX_DROPS of them are dropped at once (the expression stays within 4 KB)."""
    if len(drop) > MAX_DROPS:
        raise errors.UsageError(f"{len(drop)} places to drop at once; at most {MAX_DROPS}")
    for t in (ticket, *(t for t, _ in drop)):
        if not TICKET.fullmatch(t):
            raise errors.UsageError(f"not a ticket: {t!r}", hint="tickets are 16 hex digits")


def _seen(outcome: Outcome, ticket: str) -> int | None:
    waiter = outcome.line.find(ticket)
    return None if waiter is None else waiter.seen_ms


def _drop_values(drop: Drops) -> dict[str, Any]:
    return {f"{POLLED}{t}": seen for t, seen in drop}


def _seconds_number(ms: int) -> int | float:
    """Lease duration in seconds as 0.2.0 wrote it (an integer when whole)."""
    return ms // 1000 if ms % 1000 == 0 else ms / 1000
