"""`awsflock dev-server`: a local endpoint that awsflock commands use with no AWS set-up."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tests.integration.conftest import BIN, Cli, cli_env


@pytest.fixture
def dev_server():
    proc = subprocess.Popen(
        [str(BIN), "dev-server", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env("", ""),
    )
    try:
        line = proc.stdout.readline().strip()
        yield proc, line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_dev_server_prints_the_export_line_serves_and_stops_cleanly(dev_server, sig):
    proc, line = dev_server
    assert line.startswith("export AWSFLOCK_ENDPOINT_URL=http://127.0.0.1:")
    url = line.split("=", 1)[1]
    cli = Cli(url, "awsflock")
    assert cli("table-create", "-q").returncode == 0
    got = cli("acquire", "demo", "--no-wait")
    assert got.returncode == 0, got.stderr
    assert cli("acquire", "demo", "--no-wait").returncode == 3
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "dev server stopped" in err and "Traceback" not in err


def test_dev_server_on_a_busy_port_is_one_line_exit_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [str(BIN), "dev-server", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "already in use" in lines[0] and "--port" in lines[0]


def test_dev_server_without_the_extra_says_what_to_install(monkeypatch):
    from awsflock.cli import cli

    # As if moto[server] were missing.
    monkeypatch.setitem(sys.modules, "moto.moto_server.werkzeug_app", None)
    result = CliRunner().invoke(cli, ["dev-server", "--port", "0"])
    assert result.exit_code == 1
    assert "pip install 'awsflock[local]'" in result.stderr
    assert result.stdout == ""
