"""The real ``awsflock`` executable exporting its metrics: over OTLP/HTTP to a receiver this test
runs on loopback (which decodes what arrives), and to a Prometheus textfile read back by
Prometheus's own text-format parser. A collector that never answers holds no command up."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import BIN, Cli
from tests.servers import Server

proto = pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")
parser = pytest.importorskip("prometheus_client.parser")


class Receiver:
    """An OTLP/HTTP metrics endpoint: every request's data points, decoded."""

    def __init__(self) -> None:
        self.points: list[tuple[str, dict[str, str], Any]] = []
        self.resources: list[dict[str, str]] = []
        received = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = proto.ExportMetricsServiceRequest.FromString(body)
                received.take(request)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()
                self.wfile.write(proto.ExportMetricsServiceResponse().SerializeToString())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self, request: Any) -> None:
        for rm in request.resource_metrics:
            self.resources.append({a.key: a.value.string_value for a in rm.resource.attributes})
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    kind = metric.WhichOneof("data")
                    for p in getattr(metric, kind).data_points:
                        attrs = {a.key: a.value.string_value for a in p.attributes}
                        value = p.as_int if kind == "sum" else (p.count, p.sum)
                        self.points.append((metric.name, attrs, value))

    def value(self, name: str, **attributes: str) -> list[Any]:
        """The last value sent of each matching series (sums are cumulative: a periodic export
        and the last one at exit send the same series again)."""
        last: dict[tuple[tuple[str, str], ...], Any] = {}
        for n, a, v in self.points:
            if n == name and attributes.items() <= a.items():
                last[tuple(sorted(a.items()))] = v
        return list(last.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def cli(moto_server: Server, tmp_path: Path) -> Cli:
    table = "metrics-" + tmp_path.name[-8:].replace("_", "")
    cli = Cli(moto_server.url, table)
    assert cli("table-create", "-q").returncode == 0
    return cli


def otlp(url: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": url,
        "OTEL_SERVICE_NAME": "deploy-box",
        "OTEL_RESOURCE_ATTRIBUTES": "host.name=ci-7",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }


def test_acquire_and_a_busy_no_wait_export_their_outcomes(cli: Cli, receiver: Receiver, lock_name):
    env = otlp(receiver.url)
    got = cli("acquire", lock_name, **env)
    assert got.returncode == 0, got.stderr
    busy = cli("acquire", lock_name, "--no-wait", **env)
    assert busy.returncode == 3
    assert cli("release", lock_name, got.stdout.strip(), **env).returncode == 0
    assert receiver.value("awsflock.acquisitions", lock=lock_name, outcome="granted") == [1]
    assert receiver.value("awsflock.acquisitions", lock=lock_name, outcome="busy") == [1]
    assert receiver.value("awsflock.releases", outcome="released", store="dynamodb") == [1]
    steps = {a["step"] for n, a, _ in receiver.points if n == "awsflock.store.request.duration"}
    assert {"acquire", "release"} <= steps
    assert {"service.name": "deploy-box", "host.name": "ci-7"}.items() <= receiver.resources[
        0
    ].items()


def test_run_that_loses_its_lease_exports_the_loss(cli: Cli, receiver: Receiver, lock_name):
    env = otlp(receiver.url)
    script = f"{BIN} force-release {lock_name} --yes --reason test >/dev/null 2>&1; sleep 30"
    ran = cli("run", lock_name, "--lease-duration", "3s", "--", "sh", "-c", script, **env)
    assert ran.returncode == 124, ran.stderr
    assert receiver.value("awsflock.leases.lost", lock=lock_name, reason="force_released") == [1]
    assert receiver.value("awsflock.renewals", lock=lock_name, outcome="lost") == [1]


def test_the_keep_alive_renewer_exports_its_renewals_while_it_lives(
    cli: Cli, receiver: Receiver, lock_name
):
    env = otlp(receiver.url)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        got = cli(
            "acquire", lock_name, "--while-pid", str(sleeper.pid), "--lease-duration", "3s", **env
        )
        assert got.returncode == 0, got.stderr
        deadline = time.monotonic() + 30
        while not receiver.value("awsflock.renewals", lock=lock_name, outcome="ok"):
            assert time.monotonic() < deadline, receiver.points
            time.sleep(0.2)
        assert cli("release", lock_name, got.stdout.strip()).returncode == 0
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_collector_that_never_answers_holds_no_command_up(cli: Cli, lock_name):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # accepts connections, never reads or answers
    try:
        env = otlp(f"http://127.0.0.1:{silent.getsockname()[1]}")
        held = cli("acquire", lock_name)
        started = time.monotonic()
        busy = cli("acquire", lock_name, "--no-wait", **env)
        took = time.monotonic() - started
        assert busy.returncode == 3 and "Traceback" not in busy.stderr, busy.stderr
        # One request, then at most the last export's 1 s (and the interpreter's start).
        assert took < 4.0, took
        # What OpenTelemetry says of it follows awsflock's format and -q like any other line.
        said = cli("acquire", lock_name, "--no-wait", "--log-format", "json", **env).stderr
        assert all(line.startswith("{") for line in said.splitlines()), said
        assert "shutdown can only be called once" not in said
        assert cli("acquire", lock_name, "--no-wait", "-q", **env).stderr.count("\n") <= 1
        assert cli("release", lock_name, held.stdout.strip()).returncode == 0
    finally:
        silent.close()


def test_a_bad_endpoint_or_textfile_is_one_warning_and_changes_no_exit_code(
    cli: Cli, lock_name, tmp_path
):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "not-a-url", "AWSFLOCK_METRICS_TEXTFILE": str(tmp_path)}
    got = cli("acquire", lock_name, "--log-format", "json", **env)
    assert got.returncode == 0
    lines = got.stderr.splitlines()
    assert all(line.startswith("{") for line in lines), got.stderr
    assert any("could not write the metrics" in line for line in lines)
    assert not list(tmp_path.parent.glob(tmp_path.name + ".lock"))
    quiet = cli("acquire", lock_name, "--no-wait", "-q", **env)
    assert quiet.returncode == 3 and "metrics" not in quiet.stderr


def test_the_prometheus_textfile_adds_up_commands_and_parses(cli: Cli, lock_name, tmp_path):
    path = tmp_path / "textfile" / "awsflock.prom"
    env = {"AWSFLOCK_METRICS_TEXTFILE": str(path)}
    for _ in range(2):
        got = cli("acquire", lock_name, **env)
        assert cli("release", lock_name, got.stdout.strip(), **env).returncode == 0
    assert cli("acquire", lock_name, **env).returncode == 0
    assert cli("acquire", lock_name, "--no-wait", **env).returncode == 3
    families = {f.name: f for f in parser.text_string_to_metric_families(path.read_text())}
    acquisitions = {s.labels["outcome"]: s.value for s in families["awsflock_acquisitions"].samples}
    assert acquisitions == {"granted": 3.0, "busy": 1.0}
    wait = families["awsflock_acquire_wait_seconds"]
    assert wait.type == "histogram"
    counts = [s.value for s in wait.samples if s.name.endswith("_count")]
    assert counts == [3.0]
    # Beside it only its lock file, which node_exporter ignores (it reads *.prom).
    assert sorted(p.name for p in path.parent.iterdir()) == ["awsflock.prom", "awsflock.prom.lock"]


def test_without_the_variables_nothing_is_exported_and_no_sdk_is_loaded(cli: Cli, lock_name):
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['awsflock', 'acquire', {lock_name!r}, '--no-wait']\n"
        "import awsflock.cli.app as app\n"
        "try:\n    app.cli.main(prog_name='awsflock')\nexcept SystemExit:\n    pass\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'loaded'\n"
    )
    done = subprocess.run(
        [str(BIN.parent / "python"), "-c", code], env=cli.env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_a_held_textfile_lock_holds_no_command_up_and_the_next_command_adds_its_counts(
    cli: Cli, lock_name, tmp_path
):
    path = tmp_path / "awsflock.prom"
    env = {"AWSFLOCK_METRICS_TEXTFILE": str(path)}
    # Another writer, paused while it holds the lock file (or stuck on a hung mount).
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys\n"
            f"f = open({str(path) + '.lock'!r}, 'a')\n"
            "fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        started = time.monotonic()
        got = cli("acquire", lock_name, "--no-wait", timeout=30, **env)
        took = time.monotonic() - started
        # A command refused before it set up its logging still says it (the library's loggers
        # alone print nothing).
        refused = cli("acquire", timeout=30, **env)
    finally:
        holder.communicate("", timeout=30)
    assert got.returncode == 0, got.stderr
    assert len(got.stdout.split()) == 1  # the LEASE_ID alone
    # One request, then at most the lock's 0.5 s wait (and the interpreter's start).
    assert took < 5.0, took
    (warning,) = got.stderr.splitlines()
    assert warning.startswith(f"awsflock: warning: metrics not written to {path}: its lock file")
    assert refused.returncode == 2
    assert refused.stderr.count("awsflock: warning: metrics not written") == 1, refused.stderr
    released = cli("release", lock_name, got.stdout.strip(), **env)
    assert released.returncode == 0 and released.stderr == ""
    families = {f.name: f for f in parser.text_string_to_metric_families(path.read_text())}
    assert [s.value for s in families["awsflock_acquisitions"].samples] == [1.0]
    assert [s.value for s in families["awsflock_releases"].samples] == [1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["awsflock.prom", "awsflock.prom.lock"]
