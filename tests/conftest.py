"""Shared fixtures: fake AWS credentials, in-process moto, a fake clock."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

# Never let a test reach real AWS: fake credentials and a fixed region for every test.
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
)
for _name in (
    "AWS_PROFILE",
    "AWSFLOCK_TABLE",
    "AWSFLOCK_ENDPOINT_URL",
    "DYNAMO_ENDPOINT_URL",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_REGION",
):
    os.environ.pop(_name, None)


@pytest.fixture
def clock():
    from awsflock.clock import FakeClock

    return FakeClock()


@pytest.fixture
def moto(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """In-process moto with an awsflock table; yields a raw DynamoDB client.

    Its tries are waited for as long as they take: in-process moto answers without a network,
    so a try only outlives its budget on a machine too busy to run it (a fast-tier test failed
    so, "did not answer in time (1 try in 5.1s)", at load 8 on two cores). The budgets
    themselves are tested against real servers that stay silent (tests/test_wrong_endpoint.py,
    tests/integration)."""
    from moto import mock_aws

    from awsflock.stores.remote import worker

    monkeypatch.setattr(worker, "TRY_GRACE", 300.0)
    with mock_aws():
        import botocore.session

        client = botocore.session.get_session().create_client("dynamodb", region_name="us-east-1")
        client.meta.events.register("before-parameter-build.dynamodb", expressions_within_4_kb)
        from awsflock.stores.dynamodb import DynamoDBStore as Store

        Store("awsflock", client).create()  # type: ignore[arg-type]  # botocore is untyped
        yield client


#: The expressions of a request, which DynamoDB takes up to 4 KB each (moto takes any).
EXPRESSIONS = (
    "ConditionExpression",
    "UpdateExpression",
    "ProjectionExpression",
    "KeyConditionExpression",
    "FilterExpression",
)


def expressions_within_4_kb(params: dict[str, Any], model: Any, **_: Any) -> None:
    """Refuse a request with an expression over 4 KB, as DynamoDB does and moto does not (a
    pool-resize of 100 slots to 2 sent 10 KB, refused by DynamoDB Local only)."""
    from botocore.exceptions import ClientError

    found = [params, *(next(iter(each.values())) for each in params.get("TransactItems", []))]
    for request in found:
        for name in EXPRESSIONS:
            size = len(request.get(name, "").encode())
            if size > 4096:
                message = f"Invalid {name}: Expression size has exceeded the maximum allowed size"
                error: Any = {"Error": {"Code": "ValidationException", "Message": message}}
                raise ClientError(error, model.name)


@pytest.fixture
def moto_requests(moto: Any) -> list[str]:
    """The operations sent to ``moto``, in order (cleared by a test where it starts counting)."""
    sent: list[str] = []

    def count(model: Any, **_: Any) -> None:
        sent.append(model.name)

    moto.meta.events.register("before-call.dynamodb", count)
    return sent


@pytest.fixture
def make_table(moto, clock):
    """Build LockTables sharing the moto table and the fake clock, one per simulated host."""
    from awsflock.lock.lease import LockTable
    from awsflock.records import Identity

    def make(owner: str = "host-a", **kwargs):
        return LockTable(
            "awsflock",
            client=kwargs.pop("client", moto),
            clock=kwargs.pop("clock", clock),
            identity=Identity(owner=owner, host=owner, pid=100),
            **kwargs,
        )

    return make


@pytest.fixture(params=["dynamodb", "memory"])
def make_any_table(request, clock):
    """As ``make_table``, on each store in turn: the DynamoDB store on in-process moto, and the
    in-memory store. For tests of the protocol that hold on every store."""
    from awsflock.lock.lease import LockTable
    from awsflock.records import Identity

    if request.param == "dynamodb":
        from awsflock.stores.dynamodb import DynamoDBStore

        client = request.getfixturevalue("moto")

        def new_store(clock):
            return DynamoDBStore("awsflock", client, clock=clock)
    else:
        from awsflock.stores.memory import MemoryStore

        memory = MemoryStore()

        def new_store(clock):
            return memory

    def make(owner: str = "host-a", **kwargs):
        table_clock = kwargs.pop("clock", clock)
        return LockTable(
            store=new_store(table_clock),
            clock=table_clock,
            identity=Identity(owner=owner, host=owner, pid=100),
            **kwargs,
        )

    make.kind = request.param  # type: ignore[attr-defined]
    return make


#: The files whose tests take longest in all (in the CI log: about 5, 4, 2 and 2 minutes):
#: they start first, so that under ``-n 2 --dist loadfile`` (scripts/test) neither worker is
#: left running one of them alone at the end. The other files follow, those with more tests
#: first (xdist's own order, which scripts/test turns off with --no-loadscope-reorder so that it
#: keeps this one).
LONGEST_FIRST = (
    "tests/test_simulation_mutants.py",
    "tests/chaos/test_chaos.py",
    "tests/test_simulation.py",
    "tests/integration/test_simulation_servers.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first, then by number of tests; a file's tests keep their order."""
    files = Counter(item.nodeid.split("::")[0] for item in items)

    def rank(item: pytest.Item) -> tuple[int, int, str]:
        path = item.nodeid.split("::")[0]
        first = LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)
        return (first, -files[path], path)

    items.sort(key=rank)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say at the end of every run, even with -q, which step programs were not executed (their
    server is missing on this machine): a typo in them would have passed."""
    from tests.helpers import STEP_PROGRAM_NOT_RUN

    reasons = set()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
        if STEP_PROGRAM_NOT_RUN in reason:
            reasons.add(reason.split(STEP_PROGRAM_NOT_RUN + ": ", 1)[-1])
    if reasons:
        terminalreporter.write_sep(
            "!", "STEP PROGRAMS NOT CHECKED ON A SERVER", red=True, bold=True
        )
        for reason in sorted(reasons):
            terminalreporter.write_line(f"not run on a server: {reason}", red=True, bold=True)
    _time_by_file(terminalreporter, config)


def _time_by_file(terminalreporter: Any, config: pytest.Config) -> None:
    """With --durations (scripts/test's whole run, so CI's log): the time each test file took,
    setup and teardown included, longest first. The budget of the whole run is kept with it."""
    if not config.getoption("durations", None):
        return
    by_file: Counter[str] = Counter()
    tests: Counter[str] = Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            duration = getattr(report, "duration", None)
            nodeid = getattr(report, "nodeid", "")
            if duration is None or not nodeid:
                continue
            by_file[nodeid.split("::")[0]] += duration
            tests[nodeid.split("::")[0]] += getattr(report, "when", "") == "call"
    if not by_file:
        return
    terminalreporter.write_sep("=", "time by test file (all workers' seconds, top 40)")
    for path, seconds in by_file.most_common(40):
        terminalreporter.write_line(f"{seconds:8.1f}s {tests[path]:5d} tests  {path}")
    terminalreporter.write_line(f"{sum(by_file.values()):8.1f}s in all")
