"""Every bad input and fault of SPEC §7, for every command: the exit code of SPEC §3, one line
on stderr naming the problem and the fix, nothing on stdout, and never a traceback."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.faultproxy import FaultProxy
from tests.integration.conftest import BIN, cli_env
from tests.servers import free_port

LEASE = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
LONG = "x" * 2049
MISSING = "missing-table"
# (name, argv, expected exit, text the one line must contain). "{table}" is a real table.
CASES = [
    # durations
    ("acquire-zero-lease", ["acquire", "l", "--lease-duration", "0"], 2, "must be positive"),
    ("acquire-negative-lease", ["acquire", "l", "--lease-duration", "-5m"], 2, "positive"),
    ("acquire-garbage-lease", ["acquire", "l", "--lease-duration", "soon"], 2, "not a duration"),
    ("acquire-huge-lease", ["acquire", "l", "--lease-duration", "400d"], 2, "longer than"),
    ("acquire-negative-wait", ["acquire", "l", "--wait-time", "-1"], 2, "not be negative"),
    ("acquire-garbage-wait", ["acquire", "l", "--wait-time", "forever"], 2, "not a duration"),
    ("acquire-huge-wait", ["acquire", "l", "--wait-time", "30d"], 2, "forever"),
    ("acquire-bad-skew", ["acquire", "l", "--skew", "10m"], 2, "clock skew"),
    ("renew-zero-lease", ["renew", "l", LEASE, "--lease-duration", "0s"], 2, "positive"),
    ("run-zero-lease", ["run", "l", "--lease-duration", "0", "--", "true"], 125, "positive"),
    ("run-negative-wait", ["run", "l", "--wait-time", "-3s", "--", "true"], 125, "negative"),
    (
        "run-kill-after-too-long",
        ["run", "l", "--kill-after", "1h", "--", "true"],
        125,
        "--kill-after",
    ),
    ("run-bad-kill-after", ["run", "l", "--kill-after", "soon", "--", "true"], 125, "duration"),
    # lock names
    ("acquire-empty-name", ["acquire", ""], 2, "LOCK_ID is empty"),
    ("acquire-long-name", ["acquire", LONG], 2, "at most 2048"),
    ("acquire-reserved-name", ["acquire", "#awsflock#x"], 2, "may not start"),
    ("renew-empty-name", ["renew", "", LEASE], 2, "LOCK_ID is empty"),
    ("release-long-name", ["release", LONG, LEASE], 2, "at most 2048"),
    ("status-empty-name", ["status", ""], 2, "LOCK_ID is empty"),
    ("run-empty-name", ["run", "", "--", "true"], 125, "LOCK_ID is empty"),
    (
        "force-release-long-name",
        ["force-release", LONG, "--reason", "x", "--yes"],
        2,
        "at most 2048",
    ),
    ("acquire-missing-name", ["acquire"], 2, "Missing argument"),
    # lease ids
    ("renew-bad-lease", ["renew", "l", "12345"], 2, "is not a LEASE_ID"),
    ("release-bad-lease", ["release", "l", "not-a-uuid"], 2, "is not a LEASE_ID"),
    ("release-missing-lease", ["release", "l"], 2, "Missing argument"),
    (
        "force-release-bad-lease",
        ["force-release", "l", "--reason", "x", "--lease-id", "zz"],
        2,
        "is not a LEASE_ID",
    ),
    # slots
    ("acquire-zero-slots", ["acquire", "l", "--slots", "0"], 2, "--slots"),
    ("acquire-too-many-slots", ["acquire", "l", "--slots", "1000"], 2, "--slots"),
    ("run-zero-slots", ["run", "l", "--slots", "0", "--", "true"], 125, "--slots"),
    ("status-negative-slots", ["status", "l", "--slots", "-2"], 2, "--slots"),
    ("pool-resize-one-slot", ["pool-resize", "l", "--slots", "1"], 2, "--slots"),
    # run's command
    ("run-without-command", ["run", "l"], 125, "no command to run"),
    ("run-command-not-found", ["run", "l", "--", "no-such-command-zz"], 127, "not found"),
    ("run-not-executable", ["run", "l", "--", __file__], 126, "not executable"),
    ("run-both-c-and-command", ["run", "l", "-c", "true", "--", "true"], 125, "not both"),
    ("run-bad-conflict-code", ["run", "l", "-E", "300", "--", "true"], 125, "0<=x<=255"),
    # other usage
    ("acquire-bad-conflict-code", ["acquire", "l", "--conflict-exit-code", "-1"], 2, "0<=x<=255"),
    ("force-release-no-reason", ["force-release", "l", "--yes"], 2, "--reason"),
    (
        "force-release-empty-reason",
        ["force-release", "l", "--reason", " ", "--yes"],
        2,
        "--reason is required",
    ),
    ("force-release-unnamed", ["force-release", "l", "--reason", "x"], 2, "--lease-id"),
    (
        "force-release-long-reason",
        ["force-release", "l", "--reason", "x" * 1001, "--yes"],
        2,
        "--reason is 1001 characters; at most 1000",
    ),
    ("unknown-command", ["frobnicate"], 2, "No such command"),
    ("unknown-option", ["acquire", "l", "--frob"], 2, "No such option"),
    ("bad-log-format", ["acquire", "l", "--log-format", "xml"], 2, "--log-format"),
    ("bad-billing-mode", ["table-create", "--billing-mode", "free"], 2, "--billing-mode"),
    ("dev-server-bad-port", ["dev-server", "--port", "70000"], 2, "--port"),
    # missing table
    ("acquire-missing-table", ["acquire", "l", "--tablename", MISSING], 1, "table-create"),
    ("renew-missing-table", ["renew", "l", LEASE, "--tablename", MISSING], 1, "table-create"),
    ("release-missing-table", ["release", "l", LEASE, "--tablename", MISSING], 1, "table-create"),
    ("status-missing-table", ["status", "l", "--tablename", MISSING], 1, "table-create"),
    ("list-missing-table", ["list", "--tablename", MISSING, "--json"], 1, "table-create"),
    ("audit-missing-table", ["audit", "--tablename", MISSING], 1, "table-create"),
    ("run-missing-table", ["run", "l", "--tablename", MISSING, "--", "true"], 125, "table-create"),
    (
        "force-release-missing-table",
        ["force-release", "l", "--tablename", MISSING, "--reason", "x", "--yes"],
        1,
        "table-create",
    ),
    # lease not held
    ("renew-not-held", ["renew", "nobody-holds-this", LEASE], 3, "does not hold"),
    ("release-not-held", ["release", "nobody-holds-this", LEASE], 3, "does not hold"),
    (
        "force-release-not-held",
        ["force-release", "nobody-holds-this", "--reason", "x", "--yes"],
        3,
        "not held",
    ),
]


@pytest.fixture(scope="module")
def table(moto_server) -> str:
    name = "bad-input"
    env = cli_env(moto_server.url, name)
    subprocess.run([str(BIN), "table-create", "-q"], env=env, check=True, timeout=60)
    return name


def assert_one_line(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert text in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("name,argv,code,text", CASES, ids=[c[0] for c in CASES])
def test_bad_input(moto_server, table, name, argv, code, text):
    result = subprocess.run(
        [str(BIN), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(moto_server.url, table),
        stdin=subprocess.DEVNULL,
    )
    assert_one_line(result, code, text)


def test_there_are_at_least_forty_cases():
    assert len(CASES) + len(FAULTS) >= 40


FAULTS = [
    ("unreachable", 1, "cannot reach DynamoDB"),
    ("denied", 1, "access denied for dynamodb:UpdateItem"),
    ("throttled", 1, "throttling"),
    ("no-region", 1, "no AWS region"),
    ("no-credentials", 1, "no AWS credentials"),
    ("run-unreachable", 125, "cannot reach DynamoDB"),
    ("status-denied", 1, "access denied for dynamodb:GetItem"),
    ("list-denied", 1, "access denied for dynamodb:Scan"),
]


@pytest.mark.parametrize("name,code,text", FAULTS, ids=[f[0] for f in FAULTS])
def test_faults(moto_server, table, name, code, text):
    env = cli_env(moto_server.url, table)
    argv = ["acquire", "l", "--no-wait"]
    proxy = None
    if name.startswith("run-"):
        argv = ["run", "l", "--no-wait", "--", "true"]
    if name.endswith("unreachable"):
        env["AWSFLOCK_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"
    elif name.endswith(("denied", "throttled")):
        action = "denied" if name.endswith("denied") else "busy"
        proxy = FaultProxy(("127.0.0.1", moto_server.port), lambda target, n: action)
        env["AWSFLOCK_ENDPOINT_URL"] = proxy.url
        if name.startswith("status"):
            argv = ["status", "l"]
        elif name.startswith("list"):
            argv = ["list"]
    else:
        # Real AWS: no endpoint, nothing configured (no network is used: it fails first).
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS", "DYNAMO"))}
        env.update(
            {
                "AWS_CONFIG_FILE": "/nonexistent",
                "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                "AWS_EC2_METADATA_DISABLED": "true",
            }
        )
        if name == "no-credentials":
            env["AWS_REGION"] = "eu-west-1"
    try:
        result = subprocess.run(
            [str(BIN), *argv],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    finally:
        if proxy is not None:
            proxy.close()
    assert_one_line(result, code, text)
