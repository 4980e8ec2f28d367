"""awsflock.metrics: every instrument recorded with its attributes for each outcome, read back
with the OpenTelemetry SDK's in-memory reader; on the in-memory store (and in-process moto for
the store's requests) with a fake clock. And nothing of OpenTelemetry imported when unused."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from awsflock import errors, metrics
from awsflock.lock.admin import force_release
from awsflock.lock.lease import LockTable
from awsflock.records import Identity
from awsflock.stores.memory import MemoryStore

sdk = pytest.importorskip("opentelemetry.sdk.metrics")
export = pytest.importorskip("opentelemetry.sdk.metrics.export")


@pytest.fixture
def reader() -> Iterator[Any]:
    reader = export.InMemoryMetricReader()
    metrics.use(sdk.MeterProvider(metric_readers=[reader]))
    yield reader
    metrics.use(None)


def points(reader: Any) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Each metric's data points: (attributes, value: a sum, or a histogram's (count, sum))."""
    found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for p in metric.data.data_points:
                    value = (p.count, p.sum) if hasattr(p, "count") else p.value
                    found.setdefault(metric.name, []).append((dict(p.attributes), value))
    return found


def value(reader: Any, name: str, **attributes: str) -> Any:
    matching = [v for a, v in points(reader).get(name, []) if attributes.items() <= a.items()]
    assert len(matching) == 1, (name, attributes, points(reader).get(name))
    return matching[0]


@pytest.fixture
def table(clock) -> LockTable:
    return LockTable(store=MemoryStore(clock=clock), clock=clock, identity=Identity(owner="a"))


def other(table: LockTable) -> LockTable:
    return LockTable(store=table.store, clock=table.clock, identity=Identity(owner="b"))


def test_acquisitions_by_outcome_and_the_wait_until_the_grant(reader, table, clock):
    held = table.acquire("deploy", lease=60, wait=0)
    with pytest.raises(errors.LockBusy):
        other(table).acquire("deploy", wait=0)
    with pytest.raises(errors.LockBusy):
        other(table).acquire("deploy", wait=3)
    held.release()
    other(table).acquire("deploy", wait=3)
    assert value(reader, "awsflock.acquisitions", outcome="granted", lock="deploy") == 2
    assert value(reader, "awsflock.acquisitions", outcome="busy") == 1
    assert value(reader, "awsflock.acquisitions", outcome="timed_out") == 1
    count, _ = value(reader, "awsflock.acquire.wait", lock="deploy", store="memory")
    assert count == 2
    # The timed-out wait polled about once a second, each poll finding it held.
    assert value(reader, "awsflock.acquire.polls", lock="deploy") >= 3


def test_a_cancelled_acquire_is_counted_as_such(reader, table):
    import threading

    table.acquire("deploy", wait=0)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(errors.Cancelled):
        other(table).acquire("deploy", wait=30, cancel=cancel)
    assert value(reader, "awsflock.acquisitions", outcome="cancelled") == 1


def test_renewals_releases_hold_time_and_a_renewal_refused_after_a_force(reader, table, clock):
    held = table.acquire("deploy", lease=60, wait=0)
    clock.advance(20)
    table.renew(held)
    assert value(reader, "awsflock.renewals", outcome="ok") == 1
    count, margin = value(reader, "awsflock.renew.margin")
    assert count == 1 and margin == pytest.approx(40, abs=0.5)
    force_release(other(table), "deploy", reason="stuck", lease_id=held.lease_id)
    assert value(reader, "awsflock.force_releases", lock="deploy") == 1
    with pytest.raises(errors.NotHeld) as refused:
        table.renew(held)
    assert refused.value.reason == "force_released"
    assert value(reader, "awsflock.renewals", outcome="lost") == 1
    with pytest.raises(errors.NotHeld):
        table.release(held)
    assert value(reader, "awsflock.releases", outcome="not_held") == 1
    again = table.acquire("deploy", lease=60, wait=0)
    clock.advance(7)
    table.release(again)
    assert value(reader, "awsflock.releases", outcome="released") == 1
    count, held_s = value(reader, "awsflock.hold.duration")
    assert count == 1 and held_s == pytest.approx(7, abs=0.5)


def test_a_hold_lost_to_a_force_release_counts_the_loss_and_its_reason(reader, table, clock):
    import time

    with pytest.raises(errors.LeaseLost), table.hold("deploy", lease=30) as hold:
        force_release(other(table), "deploy", reason="stuck", lease_id=hold.lease_id)
        clock.advance(11)  # the next renewal (every third of the lease) is refused
        deadline = time.monotonic() + 5  # real time, for the renewer thread to catch up
        while not hold.lost.is_set() and time.monotonic() < deadline:
            time.sleep(0.005)
    assert value(reader, "awsflock.leases.lost", reason="force_released") == 1


def test_an_expired_lease_taken_over_is_counted_as_reclaimed(reader, table, clock):
    table.acquire("deploy", lease=10, wait=0)
    clock.advance(10 + table.skew + 1)
    other(table).acquire("deploy", wait=0)
    assert value(reader, "awsflock.leases.reclaimed", lock="deploy", store="memory") == 1


def test_store_calls_are_timed_per_step_with_their_retries(reader, moto, clock):
    from awsflock.stores.dynamodb import DynamoDBStore
    from tests.helpers import FlakyClient

    store = DynamoDBStore("awsflock", FlakyClient(moto, failures=2), clock=clock)
    table = LockTable(store=store, clock=clock, identity=Identity(owner="a"))
    table.acquire("deploy", wait=0)
    timed = points(reader)["awsflock.store.request.duration"]
    assert timed and all(a["store"] == "dynamodb" and a["step"] for a, _ in timed)
    assert sum(v for _, v in points(reader)["awsflock.store.retries"]) == 2


def test_every_kind_s_store_is_counted_under_its_kind_s_name(reader):
    from awsflock.stores import kinds

    urls = {"dynamodb": "dynamodb://t?region=eu-west-1", "postgresql": "postgresql://h/db"}
    urls |= {"redis": "redis://h:6379/0", "memory": "memory://"}
    for kind in kinds.ALL:  # opening connects to nothing
        named = kinds.parse(urls[kind.name], in_process=True)
        store = kind.open(named, kinds.Settings("t", 5.0))
        metrics.record("awsflock.force_releases", 1, None, store)
    for kind in kinds.ALL:
        assert value(reader, "awsflock.force_releases", store=kind.name) == 1


def test_the_lock_attribute_keeps_as_much_of_the_name_as_asked(monkeypatch):
    assert metrics.lock_attribute("deploy-prod-eu") == "deploy-prod-eu"
    monkeypatch.setenv(metrics.LOCK_ENV, "1")
    assert metrics.lock_attribute("deploy-prod-eu") == "deploy"
    monkeypatch.setenv(metrics.LOCK_ENV, "2")
    assert metrics.lock_attribute("ci/repo/job") == "ci/repo"
    assert metrics.lock_attribute("plain") == "plain"
    monkeypatch.setenv(metrics.LOCK_ENV, "none")
    assert metrics.lock_attribute("deploy-prod-eu") is None  # no lock attribute at all
    for wrong in ("abc", "0", "-1", "1.5"):
        monkeypatch.setenv(metrics.LOCK_ENV, wrong)
        assert metrics.lock_attribute("deploy-prod-eu") == "deploy-prod-eu"
        assert "use full, none or a number" in metrics.lock_setting_error()


def test_unused_opentelemetry_is_never_imported():
    code = (
        "import sys\n"
        "from awsflock.lock.lease import LockTable\n"
        "from awsflock.stores.memory import MemoryStore\n"
        "t = LockTable(store=MemoryStore())\n"
        "t.release(t.acquire('x', wait=0))\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_opentelemetry_imported_without_a_provider_costs_nothing_until_one_is_set():
    # redis-py 8 imports the API whenever it is installed; with no provider set, the API's
    # stand-in would drop every measurement: awsflock builds none until a provider is set.
    code = (
        "from opentelemetry import metrics as api\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.metrics.export import InMemoryMetricReader\n"
        "from awsflock import metrics\n"
        "from awsflock.lock.lease import LockTable\n"
        "from awsflock.stores.memory import MemoryStore\n"
        "t = LockTable(store=MemoryStore())\n"
        "t.release(t.acquire('x', wait=0))\n"
        "assert not metrics.enabled() and metrics._made is None, 'built for the stand-in'\n"
        "reader = InMemoryMetricReader()\n"
        "api.set_meter_provider(MeterProvider(metric_readers=[reader]))\n"
        "t.release(t.acquire('x', wait=0))\n"
        "assert metrics.enabled()\n"
        "names = [m.name for r in reader.get_metrics_data().resource_metrics\n"
        "         for s in r.scope_metrics for m in s.metrics]\n"
        "assert 'awsflock.acquisitions' in names, names\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "env, otlp",
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}, True),
        ({"OTEL_METRICS_EXPORTER": "otlp"}, True),
        ({"OTEL_METRICS_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_METRICS_EXPORTER": "otlp"}, False),
        ({"OTEL_METRICS_EXPORTER": "prometheus"}, False),  # not ours to start: no exporter
        ({"OTEL_METRICS_EXPORTER": "otlp,console"}, True),  # a list, as the spec has it
    ],
)
def test_the_cli_exports_only_what_the_otel_variables_ask_for(env, otlp):
    from awsflock.cli.telemetry import problems, wanted

    assert wanted(env) == (otlp, "")
    others = "console" in env.get("OTEL_METRICS_EXPORTER", "") or "prometheus" in env.get(
        "OTEL_METRICS_EXPORTER", ""
    )
    assert bool(problems(env)) == others
    assert wanted({**env, "AWSFLOCK_METRICS_TEXTFILE": "/x.prom"}) == (otlp, "/x.prom")


def moto_table(moto, clock, client: Any = None, owner: str = "a") -> LockTable:
    from awsflock.stores.dynamodb import DynamoDBStore

    store = DynamoDBStore("awsflock", client or moto, clock=clock)
    return LockTable(store=store, clock=clock, identity=Identity(owner=owner))


def test_the_failures_of_acquire_renew_and_release_are_counted_apart(reader, moto, clock):
    from tests.helpers import FlakyClient, LosingClient

    down = moto_table(moto, clock, FlakyClient(moto, failures=10**6))
    with pytest.raises(errors.StoreError):
        down.acquire("deploy", wait=0)
    assert value(reader, "awsflock.acquisitions", outcome="error", store="dynamodb") == 1
    held = moto_table(moto, clock).acquire("deploy", lease=60, wait=0)
    with pytest.raises(errors.StoreError):
        down.renew(held)
    assert value(reader, "awsflock.renewals", outcome="transient") == 1
    with pytest.raises(errors.StoreError):
        down.release(held)  # never reached the store: failed, and it is still held
    assert value(reader, "awsflock.releases", outcome="failed") == 1
    # Every release's answer lost: it may have ended the lease, and nothing says whether.
    losing = moto_table(moto, clock, LosingClient(moto, lambda name, n: True, errors_too=True))
    with pytest.raises(errors.StoreError):
        losing.release(held)
    assert value(reader, "awsflock.releases", outcome="in_doubt") == 1


def test_a_fair_waiters_place_in_line_is_recorded(reader, table, clock):
    import threading

    table.acquire("deploy", lease=600, wait=0)
    first = threading.Event()
    cancel = threading.Event()

    def wait_in_line() -> None:
        first.set()
        with pytest.raises(errors.Cancelled):
            other(table).acquire("deploy", wait=60, fair=True, cancel=cancel)

    waiter = threading.Thread(target=wait_in_line)
    waiter.start()
    import time

    deadline = time.monotonic() + 5
    while "awsflock.acquire.place" not in points(reader) and time.monotonic() < deadline:
        time.sleep(0.01)
    cancel.set()
    waiter.join(10)
    count, total = value(reader, "awsflock.acquire.place", lock="deploy")
    assert count >= 1 and total == count  # first in line: place 1


def test_a_stale_fenced_write_is_counted(reader, moto):
    from awsflock import StaleToken, fenced_update

    moto.create_table(
        TableName="app",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    key = {"pk": {"S": "x"}}
    fenced_update(moto, "app", key, 7)
    with pytest.raises(StaleToken):
        fenced_update(moto, "app", key, 6)
    assert value(reader, "awsflock.fencing.rejections", table="app") == 1
