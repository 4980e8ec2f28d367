"""An --endpoint-url that is not DynamoDB: said as such, with no "may have been granted" where
the request cannot have reached DynamoDB, and never a grant read from a stranger's answer. An
answer that may come after DynamoDB applied the request stays in doubt, as before.

Each endpoint here is a real server on loopback, driven through the CLI in-process."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from click.testing import CliRunner

from awsflock.cli import cli

MAYBE_GRANTED = "may have been granted"


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def answering(status: int, body: bytes, headers: dict[str, str] | None = None) -> type[Any]:
    """A handler giving every POST the same answer."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(status)
            for name, value in {"Content-Type": "text/html", **(headers or {})}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


class Quiet(SimpleHTTPRequestHandler):
    """`python -m http.server`: answers POST with 501."""

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def tcp_server(on_accept: Any) -> Iterator[str]:
    """A TCP server that hands each connection to ``on_accept``."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                on_accept(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        srv.close()


def read_then_close(conn: socket.socket) -> None:
    conn.settimeout(2)
    with suppress(OSError):
        conn.recv(65536)


#: The request timeout where the outcome comes with the first answer: long, so that a loaded
#: machine's slow loopback server is never taken for a silent one.
ANSWERED = "20"
#: Where every try fails alike and the command ends only when its budget does.
UNTIL_THE_BUDGET_ENDS = "3"


def awsflock(*args: str, budget: str = ANSWERED) -> Any:
    names = ("AWSFLOCK_ENDPOINT_URL", "DYNAMO_ENDPOINT_URL", "AWS_ENDPOINT_URL")
    env: dict[str, str | None] = dict.fromkeys(names)
    return CliRunner().invoke(cli, [*args, "--request-timeout", budget], env=env)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_a_plain_http_server_is_not_a_dynamodb_endpoint():
    with http_server(Quiet) as where:
        url = f"http://{where}"
        result = awsflock("acquire", "x", "--no-wait", "--endpoint-url", url)
        assert (result.exit_code, result.stdout) == (1, "")
        assert one_line(result.stderr) == (
            f"awsflock: error: not a DynamoDB endpoint: {url} (it answered HTTP 501 Not "
            "Implemented): check --endpoint-url"
        )
        run = awsflock("run", "x", "--endpoint-url", url, "--", "true")
        assert run.exit_code == 125 and "not a DynamoDB endpoint" in one_line(run.stderr)
        status = awsflock("status", "x", "--endpoint-url", url)
        assert status.exit_code == 1 and "not a DynamoDB endpoint" in one_line(status.stderr)


@pytest.mark.parametrize(("status", "said"), [(200, "200 OK"), (404, "404 Not Found")])
def test_a_web_page_is_never_taken_for_a_grant(status, said):
    with http_server(answering(status, b"<html>hello</html>")) as where:
        url = f"http://{where}"
        result = awsflock("acquire", "x", "--no-wait", "--endpoint-url", url)
    assert (result.exit_code, result.stdout) == (1, "")
    assert f"not a DynamoDB endpoint: {url} (it answered HTTP {said})" in one_line(result.stderr)


def test_https_to_a_plain_http_server_is_not_a_dynamodb_endpoint():
    with http_server(Quiet) as where:
        result = awsflock("acquire", "x", "--no-wait", "--endpoint-url", f"https://{where}")
    assert result.exit_code == 1
    assert one_line(result.stderr) == (
        f"awsflock: error: not a DynamoDB endpoint: https://{where} (it does not speak TLS): "
        "check --endpoint-url (http:// for a plain HTTP server)"
    )


def test_a_failed_tls_handshake_leaves_nothing_in_doubt():
    with tcp_server(lambda conn: None) as where:  # closed at once: the handshake meets EOF
        result = awsflock(
            "acquire",
            "x",
            "--no-wait",
            "--endpoint-url",
            f"https://{where}",
            budget=UNTIL_THE_BUDGET_ENDS,
        )
    assert result.exit_code == 1
    assert "TLS handshake with DynamoDB" in one_line(result.stderr)


def banner(text: bytes):
    """A server that speaks first, and not HTTP (an SSH server's greeting)."""

    def on_accept(conn: socket.socket) -> None:
        conn.sendall(text)
        read_then_close(conn)

    return on_accept


def like_redis(conn: socket.socket) -> None:
    """As redis-server meets us: a connection that starts like HTTP is closed without a byte
    (its guard against cross-protocol requests); its own protocol is answered."""
    conn.settimeout(2)
    with suppress(OSError):
        if conn.recv(65536).startswith(b"*"):
            conn.sendall(b"+PONG\r\n")


def like_redis_reading_the_first_line(conn: socket.socket) -> None:
    """As redis-server meets us when our request's body arrives after its first line was read:
    closed with the body unread, which the kernel turns into a reset."""
    conn.settimeout(2)
    with suppress(OSError):
        first = conn.recv(1)
        if first == b"*":
            conn.recv(64)
            conn.sendall(b"+PONG\r\n")
            return
        while b"\r\n" not in first:  # the request line only; what follows stays unread
            first += conn.recv(1)
        threading.Event().wait(0.3)  # the rest arrives, unread


@pytest.mark.parametrize(
    ("server", "said"),
    [
        (
            banner(b"SSH-2.0-OpenSSH_9.2\r\n"),
            "it answered 'SSH-2.0-OpenSSH_9.2', which is not HTTP",
        ),
        (like_redis, "it answers as a Redis server; for a Redis store, use --store redis://"),
        (
            like_redis_reading_the_first_line,
            "it answers as a Redis server; for a Redis store, use --store redis://",
        ),
    ],
    ids=["ssh", "redis", "redis, reset"],
)
def test_a_server_of_another_protocol_is_not_a_dynamodb_endpoint_and_grants_nothing(
    server, said, monkeypatch
):
    from awsflock.stores.dynamodb import strangers

    monkeypatch.setattr(strangers, "PROBE_S", float(ANSWERED))  # however loaded the machine
    with tcp_server(server) as where:
        url = f"http://{where}"
        result = awsflock("acquire", "x", "--no-wait", "--endpoint-url", url)
    assert (result.exit_code, result.stdout) == (1, "")
    line = one_line(result.stderr)
    assert line.startswith(f"awsflock: error: not a DynamoDB endpoint: {url} ({said}")
    assert MAYBE_GRANTED not in line


DYNAMODB_500 = answering(
    500,
    json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError"}).encode(),
    {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "R1"},
)


@pytest.mark.parametrize(
    "endpoint",
    [
        pytest.param(lambda: http_server(DYNAMODB_500), id="DynamoDB's own 500"),
        pytest.param(lambda: http_server(answering(502, b"<html>bad gateway</html>")), id="502"),
        pytest.param(lambda: http_server(answering(200, b"")), id="empty 200"),
        pytest.param(lambda: tcp_server(read_then_close), id="closed after the request"),
    ],
)
def test_an_answer_that_may_follow_the_write_stays_in_doubt(endpoint):
    """A proxy's 5xx or a lost connection may come after DynamoDB applied the write: the
    attempt is named with the command that frees it, as before."""
    with endpoint() as where:
        result = awsflock(
            "acquire",
            "x",
            "--no-wait",
            "--endpoint-url",
            f"http://{where}",
            budget=UNTIL_THE_BUDGET_ENDS,
        )
    assert (result.exit_code, result.stdout) == (1, "")
    assert MAYBE_GRANTED in result.stderr
    assert "not a DynamoDB endpoint" not in result.stderr


def test_a_refusal_after_a_try_that_may_have_landed_leaves_the_attempt_named():
    """The first try loses its connection after its request was sent (it may have been
    applied); the retry meets a stranger's answer. The attempt is still named, with its release
    command."""
    seen: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append(1)
            if len(seen) == 1:
                self.close_connection = True  # no answer: the request may have been applied
                return
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as where:
        result = awsflock("acquire", "x", "--no-wait", "--endpoint-url", f"http://{where}")
    assert (result.exit_code, result.stdout) == (1, "")
    assert MAYBE_GRANTED in result.stderr and "not a DynamoDB endpoint" in result.stderr


def test_a_try_stalled_before_its_request_left_is_never_sent_nor_reported_in_doubt(monkeypatch):
    # A try whose preparation outlives its time (here botocore's before-call; in life a slow
    # credential refresh or a starved thread): the command says it was not sent, names no
    # lease that may have been granted, and the request, once let go, never leaves.
    from awsflock.stores.dynamodb import base

    let_go, connections = threading.Event(), []
    made = base.make_client

    def stalling(**kwargs: Any) -> Any:
        client = made(**kwargs)
        client.meta.events.register("before-call.dynamodb", lambda **_: let_go.wait(30) and None)
        return client

    monkeypatch.setattr(base, "make_client", stalling)
    before = set(threading.enumerate())
    with tcp_server(lambda conn: connections.append(conn)) as where:
        result = awsflock(
            "acquire", "x", "--no-wait", "--endpoint-url", f"http://{where}", budget="1"
        )
        let_go.set()
        for thread in set(threading.enumerate()) - before:
            if thread.name == "awsflock-request":  # the given-up try's: it ends once let go
                thread.join(30)
                assert not thread.is_alive()
    assert result.exit_code == 1, result.output
    assert "given up before it was sent" in one_line(result.stderr)
    assert MAYBE_GRANTED not in result.stderr
    assert connections == []
