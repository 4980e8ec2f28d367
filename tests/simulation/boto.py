"""Faults beneath the real DynamoDB store (on in-process moto): each process's store is the
real one, its steps (several botocore calls where the protocol needs them: a transaction then
a read, a done item) and its error translation (``translate_errors``, ``may_have_applied``)
unchanged, with two things swapped in:

- ``FaultyClient`` for its botocore client: each call meets the fault its try drew, between
  the calls of a step too, and raises what botocore raises for it (``EndpointConnectionError``,
  a throttling ``ClientError``, ``ReadTimeoutError``). A call that writes the lock's item is
  applied with the checker watching; a late one lands later, on moto.
- ``SimWorkers`` for its request threads (``stores.remote.worker.Workers``): a try runs in the
  caller's simulated thread, bounded in virtual time and behind the shared gate rule
  (``connected.gate_open``): a try whose deadline passed on its way (a stalled process) is
  given up unsent, as a request thread gives up a try abandoned before it took it up.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from awsflock.protocol import Outcome
from awsflock.stores.dynamodb.items import BAR_PREFIX, PENDING_AUDIT_PREFIX, fence_key
from awsflock.stores.remote import connected, worker
from tests.simulation.checker import Violation
from tests.simulation.checker_sets import SET_STEPS
from tests.simulation.network import Call, Network, Tap, TryState, slot_of_call
from tests.simulation.world import Proc

BARS = f"SET #{BAR_PREFIX}"
#: The drop of a force's audit record from its lock's item, once copied (no step of a lease).
MOVED = f"REMOVE #{PENDING_AUDIT_PREFIX}"
#: The value of the write that counts a forced lease's lock-delay from the force's answer (the
#: checker counts it from the force's landing).
DELAY_FROM_THE_FORCE = ":answered_free_after_ms"
ENDPOINT = "https://dynamodb.us-east-1.amazonaws.com"
#: A write of a lock's state (``stores.dynamodb.state_writes``).
STATE_WRITE = "#state = :state_data"
#: The calls that may write a lock's item, and where their items are.
WRITES = {"update_item", "put_item", "delete_item", "transact_write_items"}


class FaultyClient(TryState):
    """A process's botocore client: moto's, through the simulated network."""

    def __init__(self, client: Any, network: Network, tap: Tap, inner: Any) -> None:
        self._client = client
        self._calls = set(client.meta.method_to_api_mapping)
        self._network = network
        self._tap = tap
        self._inner = inner  # the store read without faults (the state after a write)
        super().__init__()  # the try under way, per thread

    def begin(self, fault: str, deadline: float, until: float) -> None:
        self.fault, self.deadline, self.until = fault, deadline, until

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if name not in self._calls:
            return method
        return lambda **kw: self._send(name, method, kw)

    def _send(self, name: str, method: Callable[..., Any], kw: dict[str, Any]) -> Any:
        from botocore import exceptions as bx

        fault, self.fault = self.fault, "ok"
        tap, network, world = self._tap, self._network, self._network.world
        call = tap.current()
        local = tap.store._local
        tries = getattr(local, "try_number", 1)
        tap.sending(name, tries, self.deadline)
        tap.note(call, tries, f"{name} {fault}")
        if fault == "refused":
            network.travel()
            raise bx.EndpointConnectionError(endpoint_url=ENDPOINT)
        if fault == "throttled":
            network.travel()
            throttled: Any = {
                "Error": {"Code": "ThrottlingException", "Message": "Rate of requests exceeds"},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
            raise bx.ClientError(throttled, name)
        run = self._watched(call, name, method, kw)
        if fault == "late":
            world.at(network.late(), lambda: tap.land_late(call, _quietly(run)))
        elif fault != "lost":
            network.travel()
            result = run()
            if fault != "answer_lost":
                network.travel()
                return result
        world.block(wake_at=max(self.until, world.now))
        raise bx.ReadTimeoutError(endpoint_url=ENDPOINT)

    def _watched(
        self, call: Call, name: str, method: Callable[..., Any], kw: dict[str, Any]
    ) -> Callable[[], Any]:
        """The call; one that writes the lock's item, applied with the checker watching."""
        if call.operation in SET_STEPS:
            return self._watched_set(call, name, method, kw)
        lock_id = call.args[0] if call.args and isinstance(call.args[0], str) else None
        if name not in WRITES or lock_id is None or lock_id not in _keys(name, kw, lock_id):
            return lambda: method(**kw)

        def decode(_answer: Any) -> Any:
            if call.operation in ("resize", "legacy_put", "legacy_delete"):
                return True
            after = self._inner.read(lock_id)
            return dataclasses.replace(after, applied=True, slot=slot_of_call(call))

        return lambda: self._tap.apply(call, lambda: method(**kw), decode)

    def _watched_set(
        self, call: Call, name: str, method: Callable[..., Any], kw: dict[str, Any]
    ) -> Callable[[], Any]:
        """A set's step: its transaction writing several lock items (or, once refused, one
        name's own write), applied with the checker watching; a cancelled transaction is shown
        too, as refused for every name (it wrote nothing)."""
        from botocore.exceptions import ClientError

        names = [lock_id for lock_id, _ in call.args[0]]
        written = _keys(name, kw) & set(names) if name in WRITES else set()
        if not written:
            return lambda: method(**kw)
        cancelled: list[ClientError] = []

        def attempt() -> Any:
            try:
                return method(**kw)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if name != "transact_write_items" or code != "TransactionCanceledException":
                    raise
                cancelled.append(exc)
                return None

        def decode(_answer: Any) -> Any:
            if cancelled:
                return tuple(Outcome(False, None) for _ in names)
            return tuple(
                dataclasses.replace(self._inner.read(n), applied=True, slot=None)
                if n in written
                else None
                for n in names
            )

        def run() -> Any:
            result = self._tap.apply(call, attempt, decode)
            if cancelled:
                raise cancelled.pop()
            return result

        return run


def _keys(name: str, kw: dict[str, Any], lock_id: str | None = None) -> set[str]:
    """The lock_id keys of the items a write request writes as a step (not a bar: an end
    step's record of a LEASE_ID it found never granted, which the checker does not judge;
    nor the drop of a force's audit record from the lock's item once copied). A write of the
    state of ``lock_id`` on its fence record (a renewal's that keeps the lease's end) counts as
    a write of ``lock_id``."""
    entries = (
        [next(iter(item.items())) for item in kw.get("TransactItems", ())]
        if name == "transact_write_items"
        else [("Put" if name == "put_item" else "Update", kw)]
    )
    found = set()
    for kind, entry in entries:
        if kind == "ConditionCheck" or entry.get("UpdateExpression", "").startswith((BARS, MOVED)):
            continue
        if DELAY_FROM_THE_FORCE in entry.get("ExpressionAttributeValues", {}):
            continue  # a forced lease's delay counted from the force's answer: no step
        key = entry.get("Key") or entry.get("Item") or {}
        if "lock_id" in key:
            found.add(key["lock_id"].get("S"))
        state = STATE_WRITE in entry.get("UpdateExpression", "")
        if lock_id is not None and state and key.get("lock_id", {}).get("S") == fence_key(lock_id):
            found.add(lock_id)
    return found


def _quietly(run: Callable[[], Any]) -> Callable[[], None]:
    """A late call: its answer (or refusal) goes nowhere."""

    def land() -> None:
        try:
            run()
        except Violation:
            raise
        except Exception:
            pass

    return land


class SimWorkers:
    """A store's request threads, in virtual time: the try in the caller's own thread."""

    def __init__(self, client: FaultyClient, proc: Proc, network: Network) -> None:
        self.client = client
        self.proc = proc
        self.network = network

    def run(self, call: Callable[[], Any], timeout: float, where: str, announced: bool) -> Any:
        clock, tap = self.proc.clock, self.client._tap
        deadline = clock.monotonic() + timeout + worker.TRY_GRACE
        local = tap.store._local
        tap.starting(tap.current().operation, getattr(local, "try_number", 1), local.call_end)
        self.network.stall(self.proc, "a try")
        if not connected.gate_open(deadline, clock.monotonic()):  # known not sent: no doubt
            raise worker.TryGivenUp(f"{where}: the try was given up", hint="retry", sent=False)
        world = self.network.world
        self.client.begin(self.network.draw(), deadline, world.now + timeout)
        return call()

    def close(self) -> None:
        """No threads."""
