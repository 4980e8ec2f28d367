"""The DynamoDB store's base: its client, its request layer (each call retried with jittered
backoff within the caller's budget, each try run in a worker thread bounded in real time, so an
answer that trickles in cannot outlast the budget), errors and reads. ``writes`` adds the
conditional writes every step is made of; ``takes``, ``steps`` and ``ends`` build the lock steps
on them; ``store`` joins them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from awsflock import errors
from awsflock.clock import Clock, SystemClock
from awsflock.protocol import (
    DEFAULT_REQUEST_TIMEOUT,
    MAX_DROPS,
    Drops,
    Outcome,
)
from awsflock.records import ENDED_FORCED
from awsflock.stores.dynamodb.client import caller_identity, check_endpoint_url, make_client
from awsflock.stores.dynamodb.items import (
    A_LOCK_ID,
    POLLED,
    TICKET,
    done_ended,
    done_key,
    is_pool_item,
    line_from_item,
    pending_audit_name,
    pool_from_item,
)
from awsflock.stores.dynamodb.share_items import lock_record
from awsflock.stores.dynamodb.strangers import check_answer
from awsflock.stores.dynamodb.tables import (
    KEY_REFUSAL,
    TABLE_HINT,
    key_problem,
    not_awsflock_table,
)
from awsflock.stores.dynamodb.translate import may_have_applied, translate_errors
from awsflock.stores.remote.requests import RetryingStore
from awsflock.stores.remote.worker import TRY_GRACE, TryGivenUp, Workers, at_send

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

_T = TypeVar("_T")


def expiration_seconds(ms: int) -> int:
    """Whole epoch seconds at or after ``ms`` (the TTL attribute is never early)."""
    return math.ceil(ms / 1000)


#: The characters DynamoDB takes in a table's name, and its longest (refused here, before any
#: request, with the fix). Names shorter than its 3 are left to the server: the local servers
#: people test with take them.
TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,255}")


def new_version() -> str:
    """A fresh value for ``lease_id``: awsflock 0.2.0's compare-and-swap changes with it."""
    return str(uuid.uuid4())


def _check_tickets(ticket: str, drop: Drops) -> None:
    """Tickets become parts of attribute names: only the library's own form is accepted, and
    at most MAX_DROPS of them are dropped at once (the expression stays within 4 KB)."""
    if len(drop) > MAX_DROPS:
        raise errors.UsageError(f"{len(drop)} places to drop at once; at most {MAX_DROPS}")
    for t in (ticket, *(t for t, _ in drop)):
        if not TICKET.fullmatch(t):
            raise errors.UsageError(f"not a ticket: {t!r}", hint="tickets are 16 hex digits")


def _drop_values(drop: Drops) -> dict[str, Any]:
    return {f"{POLLED}{t}": seen for t, seen in drop}


def _seconds_number(ms: int) -> int | float:
    """Lease duration in seconds as 0.2.0 wrote it (an integer when whole)."""
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


class TableBase(RetryingStore):
    """A lock table in DynamoDB: what every step needs. Builds its botocore client on first
    use."""

    try_grace = TRY_GRACE

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
        if not TABLE_NAME.fullmatch(table_name):
            raise errors.UsageError(
                f"{table_name!r} cannot name a DynamoDB table",
                hint="use 3 to 255 letters, digits, '_', '-' or '.'",
            )
        check_endpoint_url(endpoint_url)
        self.table_name = table_name
        self.region = region
        self.profile = profile
        self.endpoint_url = endpoint_url
        self.request_timeout = request_timeout
        self.clock: Clock = clock or SystemClock()
        self._client = client
        self._local = threading.local()  # this thread's budget and per-try timeout
        self._workers = Workers()
        #: Whether the client's requests pass the send gate (one this store made).
        self._announced = False
        #: The process that made the client's connections (``_forked``).
        self._pid = os.getpid()
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
            # An answer that is not DynamoDB's is refused before botocore reads it as one.
            client.meta.events.register("before-parse.dynamodb", check_answer)
            # The gate at the moment of sending: a try given up before now is never sent, and
            # one given up before it got here is known not applied (``remote.worker``).
            client.meta.events.register_first("before-send.dynamodb", _at_send)
            self._announced = True
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
            signer=self._signer,
        )

    def _signer(self) -> str:
        """ "access key id K, region R": whose tables DynamoDB Local looks in ("" if unknown)."""
        client = self._client
        if client is None:
            return ""
        try:
            # botocore keeps the credentials it signs with on the client's signer alone.
            signer = getattr(client, "_request_signer", None)
            key = getattr(getattr(signer, "_credentials", None), "access_key", None)
        except Exception:  # a credential refresh that fails: the message goes without the key
            key = None
        region = client.meta.region_name
        return ", ".join(
            part for part in (f"access key id {key}" if key else "", f"region {region}") if part
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

        self._forked()  # its requests go outside the request layer's tries
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
        if isinstance(err, TryGivenUp):
            return err.maybe_applied
        return may_have_applied(err.__cause__)

    def _try(self, call: Callable[[], _T], timeout: float) -> _T:
        """One try, in a request thread given ``timeout`` (plus a grace) of real time
        (``remote.worker``): botocore's timeouts bound each socket operation, not an answer
        that trickles in byte by byte or a connect that hangs. A try still running then is
        given up (it may yet land)."""

        def work() -> _T:
            self._local.try_timeout = timeout  # read by botocore's before-call hook
            return call()

        self._forked()
        # A client not made yet is made in the try, hooked before its first request.
        announced = self._client is None or self._announced
        return self._workers.run(work, timeout, self.where(), announced)

    def _forked(self) -> None:
        """In a child forked since the client was made: let go of the parent's connections, so
        the child makes its own. Two processes writing requests on one socket would each read
        answers meant for the other. Closing them here ends the child's copies only: the
        parent's stay open (no shutdown, no TLS close_notify), and the parent goes on."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        session = getattr(getattr(self._client, "_endpoint", None), "http_session", None)
        try:
            _pools_of_its_own(session)
        except Exception:  # a botocore without these parts: its own close, which locks
            with contextlib.suppress(Exception):
                session.close()  # type: ignore[union-attr]

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

    def read(self, lock_id: str, lease_id: str | None = None) -> Outcome:
        """One strongly consistent read of a lock's item (plain or pool); with ``lease_id``, a
        second read of its done item where the lock's item no longer remembers it."""
        outcome = self._outcome(False, self._get_item(lock_id), lock_id, None)
        if lease_id is None:
            return outcome
        from awsflock.names import slot_of

        return self._remembering(
            dataclasses.replace(outcome, slot=slot_of(lease_id)), lock_id, lease_id
        )

    def _remembering(self, outcome: Outcome, lock_id: str, lease_id: str) -> Outcome:
        """``outcome`` (refused, or a read) with how ``lease_id`` ended, from its done item,
        where the record it is about no longer remembers the lease (``Outcome.remembering``):
        one more read, only then. Where the endpoint has no transactions no done item is
        written, and the outcome stays as it is."""
        if outcome.knows(lease_id):
            return outcome
        if not self._transactions:
            return _forced_unaudited(outcome, lease_id, lock_id)
        if outcome.slot is not None and outcome.pool is None:
            return outcome
        ended = done_ended(self._get_item(done_key(lease_id)), lock_id)
        return outcome if ended is None else outcome.remembering(lease_id, ended, lock_id)

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
        record = dataclasses.replace(lock_record(item), line=line)
        return Outcome(applied, record, pool, slot, line=line)


def _forced_unaudited(outcome: Outcome, lease_id: str, lock_id: str) -> Outcome:
    """``outcome`` with how ``lease_id`` ended where its lock's item keeps the audit record
    of the force that ended it (no transactions: not yet moved to its own item, ``ends``),
    however many hand-offs its short history has forgotten."""
    extra = outcome.lock.extra if outcome.lock is not None else {}
    text = extra.get(pending_audit_name(lease_id))
    if not isinstance(text, str):
        return outcome
    kept = json.loads(text)
    action_id = kept.get("action_id")
    if not action_id or kept.get("lease_id") != lease_id:
        return outcome
    return outcome.remembering(lease_id, ENDED_FORCED + str(action_id), lock_id)


def _pools_of_its_own(session: Any) -> None:
    """Give botocore's HTTP ``session``, in a forked child, connection pools of its own, and
    close the child's copies of the parent's idle connections, taking none of the old pools'
    locks: a thread of the parent may have held one as it forked (every request takes the pool
    manager's), and a lock held then is held for ever in the child."""
    old = session._manager
    fresh = type(old)(**session._get_pool_manager_kwargs())
    fresh.pool_classes_by_scheme = old.pool_classes_by_scheme
    session._manager, session._proxy_managers = fresh, {}
    for pool in list(old.pools._container.values()):
        for conn in list(getattr(getattr(pool, "pool", None), "queue", ())):
            if conn is not None:
                conn.close()


def _at_send(**_: Any) -> None:
    """botocore's ``before-send``: the request leaves only if its try is still wanted."""
    at_send()
