"""Shared helpers for the adversary scripts: one real dynalite, the real CLI (new and 0.2.0),
and the fault proxy of tests/faultproxy.py. Run from the worktree root with its venv:
    nice -n 19 .venv/bin/python -m adversary.<script>
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.faultproxy import FaultProxy  # noqa: E402
from tests.servers import LOCAL_CREDENTIALS, NO_AWS_FILES, Dynalite, local_client  # noqa: E402

BIN = ROOT / ".venv" / "bin" / "awsflock"
OLD_BIN = ROOT / ".venv-020" / "bin" / "awsflock"


@contextlib.contextmanager
def dynalite() -> Iterator[Dynalite]:
    srv = Dynalite().start()
    try:
        yield srv
    finally:
        srv.stop()


def env_for(endpoint: str, table: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS", "AWSFLOCK", "DYNAMO"))}
    env.update({**NO_AWS_FILES, "AWSFLOCK_ENDPOINT_URL": endpoint, "AWSFLOCK_TABLE": table})
    return env


def old_env(endpoint: str, table: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS", "DYNAMO"))}
    env.update({"DYNAMO_ENDPOINT_URL": endpoint, "AWSFLOCK_TABLE": table})
    env.update({**LOCAL_CREDENTIALS, **NO_AWS_FILES})
    return env


def cli(
    endpoint: str, table: str, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env_for(endpoint, table),
        stdin=subprocess.DEVNULL,
    )


def old(endpoint: str, table: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(OLD_BIN), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=old_env(endpoint, table),
        stdin=subprocess.DEVNULL,
    )


def new_table(endpoint: str) -> str:
    table = "adv" + uuid.uuid4().hex[:6]
    r = cli(endpoint, table, "table-create")
    assert r.returncode == 0, r.stderr
    return table


def audit(endpoint: str, table: str, lock: str = "") -> list[dict[str, Any]]:
    r = cli(endpoint, table, "audit", *([lock] if lock else []), "--json")
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def raw_item(endpoint: str, table: str, key: str) -> dict[str, Any] | None:
    got = local_client(endpoint).get_item(
        TableName=table, Key={"lock_id": {"S": key}}, ConsistentRead=True
    )
    return got.get("Item")


def force_killed_at(
    proxy: FaultProxy,
    table: str,
    lock: str,
    lease: str,
    actor: str,
    target: str,
    n: int,
    reason: str = "stuck",
) -> subprocess.Popen[str]:
    """Run the CLI's force-release through ``proxy``; the ``n``-th request of ``target`` (counted
    from now) is black-holed, and the CLI is SIGKILLed as soon as it is sent."""
    proxy.reset_counts()
    proxy.plan = lambda t, k: "blackhole" if (t == target and k == n) else "pass"
    p = subprocess.Popen(
        [
            str(BIN),
            "force-release",
            lock,
            "--lease-id",
            lease,
            "--reason",
            reason,
            "--actor",
            actor,
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(proxy.url, table),
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while proxy.faults["blackhole"] < 1:
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            raise RuntimeError(f"{target} #{n} never sent: {p.communicate()}")
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    proxy.plan = lambda t, k: "pass"
    return p
