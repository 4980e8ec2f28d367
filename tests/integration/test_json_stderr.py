"""Under --log-format json every line awsflock writes to stderr is one JSON object: events,
errors, conflicts, warnings, progress, run's messages; also for usage errors that click finds
before it has read --log-format. Errors carry event "error", exit_code and error (class name)."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest

from tests.faultproxy import FaultProxy
from tests.integration.conftest import BIN, Cli, cli_env
from tests.servers import free_port

pytestmark = pytest.mark.one_server_per_kind("the JSON form of what the command says")

#: These tests run on PostgreSQL too (see conftest.py).

JSON = ("--log-format", "json")
FIELDS = {"ts", "level", "logger", "event", "message"}


def json_lines(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """Every stderr line as JSON (failing on the first that is not), with the common fields."""
    lines = result.stderr.splitlines()
    assert lines, "nothing on stderr"
    events = []
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}\nstderr:\n{result.stderr}")
        assert isinstance(data, dict) and set(data) >= FIELDS, line
        events.append(data)
    return events


def the_error(result: subprocess.CompletedProcess[str], code: int, error: str) -> dict[str, Any]:
    assert result.returncode == code, result.stderr
    errors = [e for e in json_lines(result) if e["event"] == "error"]
    assert len(errors) == 1, result.stderr
    assert errors[0]["exit_code"] == code and errors[0]["error"] == error, errors[0]
    assert errors[0]["level"] == "error"
    assert "Traceback" not in result.stderr
    return errors[0]


def test_a_conflict_is_a_json_line_naming_the_holder(awsflock: Cli, lock_name):
    assert awsflock("acquire", lock_name, "--owner", "holder-1").returncode == 0
    result = awsflock("acquire", lock_name, "--no-wait", *JSON)
    assert result.returncode == 3 and result.stdout == ""
    busy = [e for e in json_lines(result) if e["event"] == "busy"]
    assert len(busy) == 1 and busy[0]["owner"] == "holder-1", result.stderr
    assert busy[0]["exit_code"] == 3 and busy[0]["lock_id"] == lock_name
    assert "held by holder-1" in busy[0]["message"]


def test_run_not_acquired_is_json(awsflock: Cli, lock_name):
    awsflock("acquire", lock_name)
    result = awsflock("run", lock_name, "--no-wait", *JSON, "--", "true")
    assert result.returncode == 75
    assert any("not running the command" in e["message"] for e in json_lines(result))


def test_an_unreachable_endpoint_is_json(awsflock: Cli, lock_name):
    closed = Cli(f"http://127.0.0.1:{free_port()}", awsflock.table)
    error = the_error(closed("acquire", lock_name, "--no-wait", *JSON), 1, "EndpointUnreachable")
    assert "cannot reach DynamoDB" in error["message"]


# The proxy answers these itself (or not at all), so one server is enough: they take seconds.
def test_an_endpoint_that_does_not_answer_in_time_is_json(moto_server, lock_name):
    with FaultProxy(("127.0.0.1", moto_server.port), lambda target, n: "delay:30") as proxy:
        result = Cli(proxy.url, "t")("status", lock_name, *JSON, timeout=120)
    assert "did not answer in time" in the_error(result, 1, "EndpointUnreachable")["message"]


def test_throttling_is_json(moto_server, lock_name):
    with FaultProxy(("127.0.0.1", moto_server.port), lambda target, n: "throttle") as proxy:
        result = Cli(proxy.url, "t")("acquire", lock_name, "--no-wait", *JSON)
    assert "throttling" in the_error(result, 1, "Throttled")["message"]


def test_access_denied_is_json(awsflock: Cli, proxy, lock_name):
    proxy.plan = lambda target, n: "denied"
    result = Cli(proxy.url, awsflock.table)("acquire", lock_name, "--no-wait", *JSON)
    assert "dynamodb:UpdateItem" in the_error(result, 1, "AccessDenied")["message"]


@pytest.mark.needs("endpoint", "a bad endpoint URL")
def test_a_bad_endpoint_is_json(awsflock: Cli, lock_name):
    result = awsflock(
        "acquire", lock_name, "--endpoint-url", "http://not a url", "--region", "us-east-1",
        *JSON, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x",
    )  # fmt: skip
    assert "http://not a url" in the_error(result, 1, "ConfigurationError")["message"]
    bare = awsflock("acquire", lock_name, "--endpoint-url", "not-a-url", *JSON)
    assert "needs a scheme" in the_error(bare, 2, "UsageError")["message"]


def test_a_missing_table_and_a_lease_not_held_are_json(awsflock: Cli, lock_name):
    missing = awsflock.for_table("no-such-table")("status", lock_name, *JSON)
    assert "table-create" in the_error(missing, 1, "TableMissing")["message"]
    lease = str(uuid.uuid4())
    the_error(awsflock("release", lock_name, lease, *JSON), 3, "NotHeld")


USAGE = [
    # argv, exit code, error class
    (["acquire", "L", "--lease-duration", "0", *JSON], 2, "BadParameter"),
    (["acquire", "L", *JSON, "--lease-duration", "0"], 2, "BadParameter"),
    (["acquire", "L", "--log-format=json", "--frob"], 2, "NoSuchOption"),
    (["acquire", *JSON], 2, "MissingParameter"),
    (["frobnicate", *JSON], 2, "NoSuchCommand"),
    (["acquire", "", *JSON], 2, "UsageError"),
    (["renew", "L", "not-a-lease-id", *JSON], 2, "UsageError"),
    (["table-create", "--read-capacity", "3", *JSON], 2, "UsageError"),
    (["run", "L", *JSON, "--kill-after", "1h", "--", "true"], 125, "UsageError"),
    (["run", *JSON, "L"], 125, "UsageError"),
    (["run", "L", *JSON, "--", "no-such-command-zz"], 127, None),
]


@pytest.mark.parametrize("argv,code,error", USAGE, ids=[" ".join(u[0]) for u in USAGE])
def test_usage_errors_are_json_even_before_the_option_is_read(awsflock: Cli, argv, code, error):
    result = awsflock(*argv)
    if error is None:
        assert result.returncode == code
        assert all(e["level"] == "error" for e in json_lines(result))
    else:
        the_error(result, code, error)
    assert result.stdout == ""


def test_the_environment_variable_chooses_json_also_for_a_bare_awsflock(server):
    env = cli_env(server.url, "t", AWSFLOCK_LOG_FORMAT="json")
    for argv, error in [
        ([], "UsageError"),
        (["acquire", "L", "--lease-duration", "0"], "BadParameter"),
        (["acquire", "L", "--log-format", "xml"], "BadParameter"),
    ]:
        result = subprocess.run(
            [str(BIN), *argv], capture_output=True, text=True, env=env, timeout=60
        )
        the_error(result, 2, error)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "L", "--kill-after", "1h", "--", "echo", "--log-format", "json"],
        ["run", "L", "--kill-after", "1h", "echo", "--log-format", "json"],
        ["acquire", "L", "--owner", "--log-format", "json", "--lease-duration", "0"],
    ],
    ids=["after-dash-dash", "in-the-command", "an-option-value"],
)
def test_a_log_format_that_is_not_awsflocks_own_changes_nothing(awsflock: Cli, argv):
    result = awsflock(*argv)
    assert result.returncode in (2, 125)
    assert result.stderr.startswith("awsflock: usage error: "), result.stderr


def test_run_with_a_lost_lease_is_json(server, awsflock: Cli, used_lock_name):
    with FaultProxy(("127.0.0.1", server.port)) as proxy:
        # The acquire passes; every renewal is throttled until the lease counts as lost.
        proxy.plan = lambda target, n: "throttle" if target == "UpdateItem" and n > 1 else "pass"
        result = Cli(proxy.url, awsflock.table)(
            "run", used_lock_name, "--lease-duration", "3s", *JSON, "--", "sleep", "30"
        )
    assert result.returncode == 124, result.stderr
    events = json_lines(result)
    assert "lost" in {e["event"] for e in events}
    assert any("lease was lost" in e["message"] for e in events)


def test_table_create_progress_and_warnings_are_json(server):
    result = Cli(server.url, "json-" + uuid.uuid4().hex[:6])("table-create", *JSON)
    assert result.returncode == 0, result.stderr
    events = json_lines(result)
    assert {"table_create", "table_ready"} <= {e["event"] for e in events}


def test_force_release_and_pool_resize_lines_are_json(awsflock: Cli, lock_name):
    awsflock("acquire", lock_name, "--owner", "someone")
    forced = awsflock("force-release", lock_name, "--reason", "stuck", "--yes", *JSON)
    assert forced.returncode == 0, forced.stderr
    done = [e for e in json_lines(forced) if e["event"] == "force_release_done"]
    assert len(done) == 1 and done[0]["owner"] == "someone"
    pool = lock_name + "-pool"
    awsflock("acquire", pool, "--slots", "2")
    resized = awsflock("pool-resize", pool, "--slots", "3", *JSON)
    assert resized.returncode == 0, resized.stderr
    assert "pool_resize_done" in {e["event"] for e in json_lines(resized)}
