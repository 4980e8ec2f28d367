"""Start-up: what a shell script pays per ``awsflock`` command, this awsflock beside awsflock
0.2.0, interleaved in one run on DynamoDB Local and on moto's server (``scripts/bench
--startup``).

Whole commands (each a new process, as a script runs them): an acquire+release cycle, a busy
``acquire --no-wait``, a ``renew``. Then where a command's time goes, phase by phase, measured
inside one process of each tool's own interpreter (``PROBE``): the interpreter's own start
(``python -c pass``), the imports the command makes, building the DynamoDB client (credentials
apart: the time botocore spends in ``Session.get_credentials``), and one request (a GetItem).
Then this awsflock's keep-alive renewer's peak memory, and ``run -- true``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Callable

#: Run by each tool's interpreter: the phases of its DynamoDB path, in milliseconds (JSON).
PROBE = r"""
import json, sys, time
start = time.perf_counter()
tool, endpoint, table = sys.argv[1:4]
if tool == "new":  # what this awsflock does before it imports botocore
    from awsflock.stores.dynamodb.client import _import_urllib3
    _import_urllib3()
import botocore.session
spent = {"credentials": 0.0}
own = botocore.session.Session.get_credentials
def timed(self):
    t = time.perf_counter()
    try:
        return own(self)
    finally:
        spent["credentials"] += time.perf_counter() - t
botocore.session.Session.get_credentials = timed
if tool == "new":
    import awsflock.cli.app, awsflock.stores.dynamodb.store
    from awsflock.stores.dynamodb.client import make_client
    imported = time.perf_counter()
    client = make_client(profile=None, region=None, endpoint_url=endpoint, request_timeout=5)
else:
    import awsflock.main, boto3
    imported = time.perf_counter()
    client = boto3.client("dynamodb", endpoint_url=endpoint)
    client._request_signer._credentials.get_frozen_credentials()
built = time.perf_counter()
client.get_item(TableName=table, Key={"lock_id": {"S": "probe"}})
sent = time.perf_counter()
print(json.dumps({
    "imports": (imported - start) * 1000,
    "client": (built - imported - spent["credentials"]) * 1000,
    "credentials": spent["credentials"] * 1000,
    "request": (sent - built) * 1000,
}))
"""

PHASES = ("interpreter", "imports", "client", "credentials", "request")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _run(binary: Path, env: dict[str, str], *args: str, check: bool = True) -> str:
    done = subprocess.run(
        [str(binary), *args], capture_output=True, text=True, env=env, timeout=120
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{binary} {args}: {done.returncode} {done.stderr}")
    return done.stdout.strip()


def _env(endpoint: str) -> dict[str, str]:
    """Both tools on the server at ``endpoint``, with the same key, no AWS files of the user's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS", "DYNAMO"))}
    env.update(
        {
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWSFLOCK_TABLE": "startup",
            "AWSFLOCK_ENDPOINT_URL": endpoint,
            "DYNAMO_ENDPOINT_URL": endpoint,
            "AWS_CONFIG_FILE": "/nonexistent",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        }
    )
    return env


def measure(
    server_name: str, endpoint: str, old: Path, new: Path, repeats: int
) -> tuple[list[tuple[str, float, float, str]], dict[str, Any]]:
    """Rows (measure, new, 0.2.0, unit) and the raw numbers, on the server at ``endpoint``."""
    env = _env(endpoint)
    _run(new, env, "table-create", "-q")
    table = env["AWSFLOCK_TABLE"]
    tools = {"new": new, "0.2.0": old}
    # Warm both (page cache; this awsflock's trimmed botocore data is made on first use).
    for binary in tools.values():
        name = "warm-" + uuid.uuid4().hex[:6]
        _run(binary, env, "release", name, _run(binary, env, "acquire", name))
    busy = "busy-" + uuid.uuid4().hex[:6]
    _run(new, env, "acquire", busy, "--lease-duration", "1h")
    renewable = {k: _run(b, env, "acquire", "renew-" + k) for k, b in tools.items()}

    samples: dict[str, dict[str, list[float]]] = {}

    def add(label: str, tool: str, value: float) -> None:
        samples.setdefault(label, {}).setdefault(tool, []).append(value)

    for _ in range(repeats):
        for tool, binary in tools.items():
            name = "cycle-" + uuid.uuid4().hex[:6]
            add(
                "acquire+release cycle",
                tool,
                _timed(
                    lambda b=binary, n=name: _run(b, env, "release", n, _run(b, env, "acquire", n))
                ),
            )
            add(
                "busy acquire --no-wait",
                tool,
                _timed(lambda b=binary: _run(b, env, "acquire", busy, "--no-wait", check=False)),
            )

            def renew(b: Path = binary, t: str = tool) -> None:
                # 0.2.0 hands out a new LEASE_ID with every renew: the next renew uses it.
                renewable[t] = _run(b, env, "renew", "renew-" + t, renewable[t])

            add("renew", tool, _timed(renew))
            python = binary.parent / "python"
            add(
                "interpreter", tool, _timed(lambda p=python: subprocess.run([str(p), "-c", "pass"]))
            )
            probe = subprocess.run(
                [str(python), "-c", PROBE, "new" if tool == "new" else "old", endpoint, table],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                cwd="/",  # not the checkout, whose awsflock would shadow the installed one
            )
            if probe.returncode != 0:
                raise RuntimeError(f"probe of {tool}: {probe.stderr}")
            for phase, ms in json.loads(probe.stdout).items():
                add(phase, tool, ms / 1000)

    rows: list[tuple[str, float, float, str]] = []
    raw: dict[str, Any] = {}
    for label in ("acquire+release cycle", "busy acquire --no-wait", "renew", *PHASES):
        values = {tool: _median(samples[label][tool]) for tool in tools}
        raw[label] = values
        prefix = "  phase: " if label in PHASES else ""
        rows.append((f"{server_name}: {prefix}{label}", values["new"], values["0.2.0"], "s"))
    return rows, raw


def renewer_peak_mb(new: Path, endpoint: str, hold_s: float = 8.0) -> float:
    """Peak resident memory (VmHWM) of this awsflock's keep-alive renewer, after ``hold_s``."""
    env = _env(endpoint)
    follow = subprocess.Popen(["sleep", str(hold_s + 30)])
    name = "renewer-" + uuid.uuid4().hex[:6]
    try:
        lease = _run(
            new,
            env,
            "acquire",
            name,
            "--keep-alive",
            "--while-pid",
            str(follow.pid),
            "--lease-duration",
            "15s",
        )
        time.sleep(hold_s)
        peak = 0.0
        for entry in Path("/proc").iterdir():
            try:
                argv = (entry / "cmdline").read_bytes()
                status = (entry / "status").read_text()
            except OSError:
                continue
            if name.encode() in argv and b"keep-alive" in argv:
                for line in status.splitlines():
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) / 1024)
        _run(new, env, "release", name, lease, check=False)
        return peak
    finally:
        follow.kill()
        follow.wait()


def run_true(new: Path, endpoint: str, repeats: int) -> float:
    """Median time of ``awsflock run NAME -- true``: acquire, start, release."""
    env = _env(endpoint)
    return _median(
        [
            _timed(lambda: _run(new, env, "run", "run-" + uuid.uuid4().hex[:6], "--", "true"))
            for _ in range(repeats)
        ]
    )


def otel_unconfigured(
    endpoint: str, plain: Path, otel: Path, repeats: int
) -> tuple[list[tuple[str, float, float, str]], dict[str, Any]]:
    """Rows (measure, with the otel extra, without it, unit): ``--help`` and the acquire+release
    cycle, the two installs taking turns, with no OTEL_* variable set (metrics unconfigured)."""
    env = {k: v for k, v in _env(endpoint).items() if not k.startswith("OTEL_")}
    env.pop("AWSFLOCK_METRICS_TEXTFILE", None)
    _run(plain, env, "table-create", "-q")
    tools = {"otel": otel, "plain": plain}
    samples: dict[str, dict[str, list[float]]] = {}
    for binary in tools.values():  # warm
        name = "warm-" + uuid.uuid4().hex[:6]
        _run(binary, env, "release", name, _run(binary, env, "acquire", name))
    for _ in range(repeats):
        for tool, binary in tools.items():
            name = "cycle-" + uuid.uuid4().hex[:6]
            cycle = _timed(
                lambda b=binary, n=name: _run(b, env, "release", n, _run(b, env, "acquire", n))
            )
            helped = _timed(lambda b=binary: _run(b, env, "--help"))
            samples.setdefault("acquire+release cycle", {}).setdefault(tool, []).append(cycle)
            samples.setdefault("--help", {}).setdefault(tool, []).append(helped)
    rows = []
    raw: dict[str, Any] = {}
    for label, by_tool in samples.items():
        values = {tool: _median(v) for tool, v in by_tool.items()}
        raw[label] = values
        rows.append(
            (f"otel extra installed, unconfigured: {label}", values["otel"], values["plain"], "s")
        )
    return rows, raw
