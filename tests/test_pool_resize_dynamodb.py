"""Resizing a pool on the DynamoDB store (in-process moto, held to DynamoDB's 4 KB per
expression by the ``moto`` fixture): a shrink whose condition would not fit goes in steps, and
one refused part-way says what size it left."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import pytest

from awsflock import errors
from awsflock.cli.status import pool_view, render_list_row, render_pool
from awsflock.lock.admin import resize_pool
from awsflock.names import MAX_SLOTS
from awsflock.records import Pool
from awsflock.stores.dynamodb import DynamoDBStore, resizes
from awsflock.stores.dynamodb.resizes import (
    MAX_EXPRESSION,
    STILL_OURS,
    resize_condition,
    resize_steps,
)
from tests.conformance.suite import SKEW, Lab
from tests.helpers import CountingClient, LosingClient


@pytest.mark.parametrize("old", [None, *range(2, MAX_SLOTS + 1)])
def test_every_step_of_every_resize_fits_and_ends_at_the_size_asked(old: int | None):
    for new in range(2, MAX_SLOTS + 1):
        steps = resize_steps(old, new)
        assert steps[0][0] == old and steps[-1][1] == new
        assert all(low == top for (_, low), (top, _) in zip(steps, steps[1:]))
        for top, low in steps:
            assert len(resize_condition(top, low, STILL_OURS).encode()) <= MAX_EXPRESSION
        assert len(steps) == 1 or all(top is not None and low < top for top, low in steps)


def test_a_shrink_of_100_slots_to_2_takes_three_requests(moto: Any, moto_requests: list[str]):
    lab = Lab(DynamoDBStore("awsflock", moto))
    name = lab.name("pool")
    lab.take(name, slot=0, slots=MAX_SLOTS)
    moto_requests.clear()
    assert lab.store.resize_pool(name, MAX_SLOTS, 2, now_ms=lab.now + 10, skew_ms=SKEW)
    assert moto_requests == ["UpdateItem"] * 3


def test_a_shrink_past_a_slot_held_already_writes_nothing(
    make_table: Any, moto_requests: list[str]
):
    table = make_table()
    lab = Lab(table.store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=40, slots=MAX_SLOTS)
    moto_requests.clear()
    with pytest.raises(errors.LockBusy) as refused:
        resize_pool(table, "pool", 2)
    assert "now has" not in refused.value.one_line()
    assert "UpdateItem" not in moto_requests
    assert table.state("pool").size == MAX_SLOTS


def test_a_shrink_refused_part_way_goes_back_to_the_old_size(
    make_table: Any, monkeypatch: pytest.MonkeyPatch
):
    table = make_table()
    lab = Lab(table.store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=0, slots=MAX_SLOTS)
    before = table.store.read("pool")
    held, _ = lab.take("pool", slot=40, slots=MAX_SLOTS, at=10)  # after pool-resize's read
    reads = iter([before])
    real_read = table.store.read
    monkeypatch.setattr(table.store, "read", lambda name: next(reads, None) or real_read(name))
    with pytest.raises(errors.LockBusy) as refused:
        resize_pool(table, "pool", 2)
    # 100 -> 61 went through; 61 -> 22 met slot 40 held, and the pool went back to 100: a
    # shrink is done whole or not at all.
    assert "taken as the shrink began): it has 100 slots again" in refused.value.one_line()
    pool = real_read("pool").pool
    assert pool is not None and (pool.size, pool.resizing_to) == (MAX_SLOTS, None)
    assert lab.take("pool", slot=41, slots=MAX_SLOTS, at=20)[1].applied  # holders of 100 go on
    assert lab.release("pool", held, slot=40, at=20).applied


class Hooked(CountingClient):
    """Runs ``hook(operation, number, request)`` before each request is sent."""

    def __init__(self, client: Any, hook: Callable[[str, int, dict[str, Any]], None]) -> None:
        super().__init__(client)
        self.hook = hook

    def __getattr__(self, name: str) -> Any:
        inner = super().__getattr__(name)
        if not callable(inner) or name in ("exceptions", "meta"):
            return inner

        def call(*args: Any, **kwargs: Any) -> Any:
            self.hook(name, self.calls[name] + 1, kwargs)
            return inner(*args, **kwargs)

        return call


def _stop_at(number: int) -> Callable[[str, int, dict[str, Any]], None]:
    """A hook that kills pool-resize (as a SIGKILL would) before its UpdateItem ``number``."""

    def hook(op: str, n: int, request: dict[str, Any]) -> None:
        if op == "update_item" and n == number:
            raise KeyboardInterrupt

    return hook


def _part_way(make_table: Any, moto: Any) -> tuple[Any, Lab]:
    """A pool of 100 slots whose shrink to 2 stopped after its first step (at 61 slots)."""
    table = make_table(client=Hooked(moto, _stop_at(2)))  # before the second step
    lab = Lab(make_table().store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=0, slots=MAX_SLOTS, lease=1)
    table.clock.advance(5)
    lab.now = round(table.clock.time() * 1000)
    with pytest.raises(KeyboardInterrupt):
        resize_pool(table, "pool", 2)
    pool = lab.store.read("pool").pool
    assert pool is not None and (pool.size, pool.resizing_to) == (61, 2)
    return table, lab


def test_no_slot_is_taken_while_a_shrink_in_steps_is_under_way(make_table: Any, moto: Any):
    # Not by a holder of the in-between size either (review 46: it was granted slot 31 while
    # a step was late, and the pool stayed at 61 slots that nobody had asked for).
    _, lab = _part_way(make_table, moto)
    for size in (61, MAX_SLOTS, 2):
        assert not lab.take("pool", slot=1, slots=size)[1].applied
    waiter = make_table("waiter")
    with pytest.raises(errors.LockBusy) as busy:
        waiter.acquire("pool", slots=61, wait=0)
    assert "is being resized to 2 slots" in busy.value.one_line()
    assert "run it again" in busy.value.one_line()
    # Run again (to the size it stopped at, even), pool-resize ends the shrink.
    assert resize_pool(make_table(), "pool", 61) == (61, 61)
    assert waiter.acquire("pool", slots=61, wait=0).slot is not None


def test_a_resize_during_a_shrink_in_steps_ends_it_and_its_next_step_is_refused(
    make_table: Any, moto: Any
):
    other = make_table("other")

    def hook(op: str, n: int, request: dict[str, Any]) -> None:
        if op == "update_item" and n == 2:  # before the second step: another operator
            assert resize_pool(other, "pool", MAX_SLOTS) == (61, MAX_SLOTS)

    table = make_table(client=Hooked(moto, hook))
    lab = Lab(other.store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=0, slots=MAX_SLOTS, lease=1)
    table.clock.advance(5)
    with pytest.raises(errors.LockBusy) as refused:
        resize_pool(table, "pool", 2)
    # Back at its old size, the refusal names another resize (review 46: it could not).
    assert "another pool-resize changed it meanwhile" in refused.value.one_line()
    pool = lab.store.read("pool").pool
    assert pool is not None and (pool.size, pool.resizing_to) == (MAX_SLOTS, None)


def test_a_step_that_lands_late_after_its_shrink_ended_changes_nothing(make_table: Any, moto: Any):
    sent: list[dict[str, Any]] = []

    def hook(op: str, n: int, request: dict[str, Any]) -> None:
        if op == "update_item":
            sent.append(request)

    table = make_table(client=Hooked(moto, hook))
    lab = Lab(make_table().store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=0, slots=MAX_SLOTS, lease=1)
    table.clock.advance(5)
    assert resize_pool(table, "pool", 2) == (MAX_SLOTS, 2)
    first, second = sent[0], sent[1]
    # Someone sets the size each step started from: a copy of that step, landing now, is
    # refused (it would set a size nobody asked for).
    for late, size in ((second, 61), (first, MAX_SLOTS)):
        assert resize_pool(make_table(), "pool", size)[1] == size
        with pytest.raises(moto.exceptions.ConditionalCheckFailedException):
            moto.update_item(**late)
        assert lab.pool_size("pool") == size


@pytest.mark.parametrize("lost", [2, 3, 4])
def test_a_step_whose_answer_was_lost_and_was_retried_counts_as_done(moto: Any, lost: int):
    # A step lands, its answer is lost, and its retry is refused: the pool already has the
    # step's size, so the shrink goes on. (UpdateItem 1 is the take; 2, 3 and 4 the steps.)
    client = LosingClient(moto, lambda op, n: op == "update_item" and n == lost)
    lab = Lab(DynamoDBStore("awsflock", client))
    name = lab.name("pool")
    lab.take(name, slot=0, slots=MAX_SLOTS)
    assert lab.store.resize_pool(name, MAX_SLOTS, 2, now_ms=lab.now + 10, skew_ms=SKEW)
    assert lab.pool_size(name) == 2
    assert client.calls["update_item"] == 5  # the take, three steps, one of them twice


class _InFlight(CountingClient):
    """Keeps the first try of each first step of a resize on its way (not sent, its answer
    lost), to be delivered late with ``land``; ``all_tries``: every try of it."""

    def __init__(self, client: Any, all_tries: bool = False) -> None:
        super().__init__(client)
        self.held: list[dict[str, Any]] = []
        self.all_tries = all_tries

    def update_item(self, **request: Any) -> Any:
        from botocore.exceptions import ReadTimeoutError

        if "#resized_by = :rid" in request["UpdateExpression"] and (
            self.all_tries or not self.held
        ):
            self.held.append(request)
            raise ReadTimeoutError(endpoint_url="http://in-flight")
        return self._client.update_item(**request)

    def land(self) -> None:
        self._client.update_item(**self.held[0])


@pytest.mark.parametrize("all_tries", [False, True])
@pytest.mark.parametrize("new", [70, 2])
def test_a_first_step_still_on_its_way_when_pool_resize_ends_never_lands(
    make_table: Any, moto: Any, all_tries: bool, new: int
):
    # Review 47: refused (a slot held) or unanswered, pool-resize ended; 10 s later the
    # first step's first try landed and set the size (70), or marked the pool for a shrink
    # in steps (to 2) that nobody was left to end.
    client = _InFlight(moto, all_tries)
    table = make_table(client=client)
    lab = Lab(make_table().store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=0, slots=MAX_SLOTS)
    seen = lab.store.read("pool").pool
    held, _ = lab.take("pool", slot=80, slots=MAX_SLOTS, at=10)
    resize = lambda: table.store.resize_pool(  # noqa: E731
        "pool", MAX_SLOTS, new, now_ms=lab.now + 20, skew_ms=SKEW, seen=seen
    )
    if all_tries:
        with pytest.raises(errors.EndpointUnreachable) as failed:
            resize()
        assert not failed.value.maybe_applied  # barred: it changes nothing, now or later
    else:
        assert not resize()
    assert lab.release("pool", held, slot=80, at=30).applied
    with pytest.raises(moto.exceptions.ConditionalCheckFailedException):
        client.land()
    pool = lab.store.read("pool").pool
    assert pool is not None and (pool.size, pool.resizing_to) == (MAX_SLOTS, None)


def test_resizing_a_stopped_shrink_again_past_a_held_slot_says_the_slot_is_held(
    make_table: Any, moto: Any, monkeypatch: pytest.MonkeyPatch
):
    # Review 47: it said "another pool-resize ... is under way", and to run it again.
    def hook(op: str, n: int, request: dict[str, Any]) -> None:
        if request.get("ConditionExpression") == STILL_OURS:  # the step back: killed
            raise KeyboardInterrupt

    table = make_table(client=Hooked(moto, hook))
    lab = Lab(make_table().store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=0, slots=MAX_SLOTS)
    before = table.store.read("pool")
    lab.take("pool", slot=30, slots=MAX_SLOTS, at=10)
    lab.take("pool", slot=40, slots=MAX_SLOTS, at=10)  # stops the second step
    reads = iter([before])
    real_read = table.store.read
    monkeypatch.setattr(table.store, "read", lambda name: next(reads, None) or real_read(name))
    with pytest.raises(KeyboardInterrupt):
        resize_pool(table, "pool", 2)
    pool = real_read("pool").pool
    assert pool is not None and (pool.size, pool.resizing_to) == (61, 2)
    with pytest.raises(errors.LockBusy) as refused:
        resize_pool(make_table(), "pool", 2)
    assert "a slot that would go away is held:" in refused.value.one_line()
    assert resize_pool(make_table(), "pool", MAX_SLOTS) == (61, MAX_SLOTS)  # ends the mark
    pool = real_read("pool").pool
    assert pool is not None and pool.resizing_to is None


def test_status_shows_a_pool_being_resized():
    pool = Pool("gpus", 61, {}, resizing_to=2)
    data = pool_view(pool, now=0.0, skew=0.0)
    assert data["resizing_to"] == 2
    assert "being resized to 2 slots" in render_pool(data)
    assert "resizing to 2" in render_list_row(data)


class _Scripted(CountingClient):
    """Runs a resize's requests as ``script`` says, by kind (``kind_of``): "hold" keeps one on
    its way (unsent, its answer lost: ``land`` delivers it; "hold once": the first only;
    "lose once": the first is sent, its answer lost),
    "lose" sends it and loses its answer (a refusal too), "refuse" fails it unsent (a refused
    connection); a callable runs first."""

    def __init__(self, client: Any, script: dict[str, Any]) -> None:
        super().__init__(client)
        self.script = script
        self.held: list[dict[str, Any]] = []
        self.lost = False

    def update_item(self, **request: Any) -> Any:
        from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

        action = self.script.get(kind_of(request))
        if callable(action):
            action()
        elif action == "lose once" and not self.lost:
            self.lost = True
            self._client.update_item(**request)
            raise ReadTimeoutError(endpoint_url="http://lost")
        elif action == "hold" or (action == "hold once" and not self.held):
            self.held.append(request)
            raise ReadTimeoutError(endpoint_url="http://in-flight")
        elif action == "refuse":
            raise EndpointConnectionError(endpoint_url="http://refused")
        if action != "lose":
            return self._client.update_item(**request)
        with contextlib.suppress(self._client.exceptions.ConditionalCheckFailedException):
            self._client.update_item(**request)
        raise ReadTimeoutError(endpoint_url="http://lost")

    def land(self) -> None:
        self._client.update_item(**self.held[0])


def kind_of(request: dict[str, Any]) -> str:
    """Which request of a resize this is (other requests: "")."""
    update, condition = request["UpdateExpression"], request.get("ConditionExpression", "")
    if update == resizes.BAR:
        return "bar"
    if update == resizes.LAST and condition == STILL_OURS:
        return "back"
    names = {resizes.ONLY: "only", resizes.FIRST: "first", resizes.MIDDLE: "middle"}
    return names.get(update, "last" if update == resizes.LAST else "")


def _shrink(make_table: Any, moto: Any, script: dict[str, Any], new: int = 2) -> Any:
    """pool-resize of a pool of 100 slots (slot 0 ran out) to ``new``, its requests run as
    ``script`` says: the error it raised, or None."""
    table = make_table(client=_Scripted(moto, script))
    lab = Lab(make_table().store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=0, slots=MAX_SLOTS, lease=1)
    table.clock.advance(5)
    try:
        resize_pool(table, "pool", new)
    except errors.AwsflockError as err:
        return err
    return None


def _pool(make_table: Any) -> tuple[int | None, int | None]:
    pool = make_table().store.read("pool").pool
    assert pool is not None
    return pool.size, pool.resizing_to


@pytest.mark.parametrize("new", [70, 2])
def test_a_bar_that_fails_keeps_the_doubt_and_says_what_to_do(make_table: Any, moto: Any, new):
    # Review 48: the bar's refused connection said nothing was applied; the first step, held
    # in the network, then marked the pool (to 2) or set a size refused earlier (to 70).
    err = _shrink(make_table, moto, {"only": "hold", "first": "hold", "bar": "refuse"}, new)
    assert isinstance(err, errors.EndpointUnreachable) and err.maybe_applied
    assert "may have been resized, or left part-way" in err.one_line()


@pytest.mark.parametrize("fault", ["refuse", "hold"])
def test_a_later_step_that_fails_goes_back_to_the_old_size(make_table: Any, moto: Any, fault):
    # Review 48: an error in the second step left the pool marked at 61 slots, and said
    # nothing of it; one held in the network landed later.
    err = _shrink(make_table, moto, {"middle": fault})
    assert isinstance(err, errors.EndpointUnreachable) and not err.maybe_applied
    assert _pool(make_table) == (MAX_SLOTS, None)


def test_a_later_step_and_its_step_back_failing_say_the_pool_is_left_part_way(
    make_table: Any, moto: Any
):
    err = _shrink(make_table, moto, {"middle": "refuse", "back": "refuse"})
    assert isinstance(err, errors.EndpointUnreachable) and err.maybe_applied
    assert "may have been resized, or left part-way" in err.one_line()
    assert _pool(make_table) == (61, 2)


def test_a_step_held_in_the_network_lands_after_the_step_back_and_changes_nothing(
    make_table: Any, moto: Any
):
    client = _Scripted(moto, {"middle": "hold"})
    table = make_table(client=client)
    lab = Lab(make_table().store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=0, slots=MAX_SLOTS, lease=1)
    table.clock.advance(5)
    with pytest.raises(errors.EndpointUnreachable):
        resize_pool(table, "pool", 2)
    with pytest.raises(moto.exceptions.ConditionalCheckFailedException):
        client.land()
    assert _pool(make_table) == (MAX_SLOTS, None)


def test_a_first_step_that_landed_then_another_resize_keeps_the_doubt(make_table: Any, moto: Any):
    # Review 48: the first step landed unanswered; another operator resized; the bar was
    # refused, and pool-resize said only "did not answer in time".
    other = make_table("other")
    script = {"first": "lose", "bar": lambda: resize_pool(other, "pool", 61)}
    err = _shrink(make_table, moto, script)
    assert isinstance(err, errors.EndpointUnreachable) and err.maybe_applied


def test_a_refusal_after_our_own_bar_names_the_held_slot(
    make_table: Any, moto: Any, monkeypatch: pytest.MonkeyPatch
):
    # Review 48: refused on a retry, barred, then told "another pool-resize changed it".
    table = make_table(client=_Scripted(moto, {"only": "hold once"}))
    lab = Lab(make_table().store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=0, slots=MAX_SLOTS)
    before = table.store.read("pool")
    lab.take("pool", slot=80, slots=MAX_SLOTS, at=10)  # after pool-resize's read
    reads = iter([before])
    real_read = table.store.read
    monkeypatch.setattr(table.store, "read", lambda name: next(reads, None) or real_read(name))
    with pytest.raises(errors.LockBusy) as refused:
        resize_pool(table, "pool", 70)
    assert "a slot that would go away is held" in refused.value.one_line()


def test_a_last_step_that_landed_unanswered_is_a_shrink_done(make_table: Any, moto: Any):
    # Review 49: the step back after it was refused (the mark gone), and pool-resize said
    # nothing had changed though the pool had its new size.
    assert _shrink(make_table, moto, {"last": "lose"}) is None
    assert _pool(make_table) == (2, None)


def test_a_step_back_refused_for_another_resize_keeps_the_doubt(make_table: Any, moto: Any):
    # Review 49: another operator resized the marked pool before the step back, which was
    # refused; pool-resize said only "did not answer in time", though it had cut the pool.
    other = make_table("other")
    script = {"middle": "refuse", "back": lambda: resize_pool(other, "pool", 61)}
    err = _shrink(make_table, moto, script)
    assert isinstance(err, errors.EndpointUnreachable) and err.maybe_applied
    assert "may have been resized, or left part-way" in err.one_line()
    assert _pool(make_table) == (61, None)


def test_a_signal_waits_until_pool_resize_s_requests_are_settled(
    monkeypatch: pytest.MonkeyPatch,
):
    # Review 49: Ctrl-C between two steps left the pool marked, and a step on its way landed
    # after the exit; TERM killed it with no word.
    import os
    import signal

    from click.testing import CliRunner

    from awsflock.cli import cli

    def resize(table: Any, lock_id: str, slots: int) -> tuple[int, int]:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1):
            os.kill(os.getpid(), signum)  # between two steps
        return 100, slots

    monkeypatch.setattr("awsflock.lock.admin.resize_pool", resize)
    monkeypatch.delenv("AWSFLOCK_STORE", raising=False)  # DynamoDB: no request is made
    result = CliRunner().invoke(cli, ["pool-resize", "gpus", "--slots", "2"])
    assert result.exit_code == 0, result.stderr
    assert "now has 2 slots (was 100)" in result.stderr
    assert "signal 2 came while pool-resize ran: it finished first" in result.stderr


def test_a_bar_whose_answer_was_lost_and_retried_says_nothing_was_applied(
    make_table: Any, moto: Any
):
    # Final walk-through: the bar landed, its answer was lost, and its retry was refused by
    # the bar itself; that was read as another resize, and the error kept a doubt it had not.
    err = _shrink(make_table, moto, {"first": "hold", "bar": "lose once"})
    assert isinstance(err, errors.EndpointUnreachable) and not err.maybe_applied
    assert _pool(make_table) == (MAX_SLOTS, None)
