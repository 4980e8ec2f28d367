"""``awsflock dev-server``: a DynamoDB-compatible endpoint on loopback, for trying awsflock and
testing scripts without AWS. It is moto's server, in memory, so everything is gone when it stops.
Needs the optional extra: ``pip install 'awsflock[local]'``. Requests are served one at a
time, so conditional writes are atomic as in DynamoDB.
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
import threading
from typing import Any, Callable

from awsflock import errors, extras

HOST = "127.0.0.1"  # loopback only: this server has no authentication


def _check_port(port: int) -> None:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise errors.ConfigurationError(
                    f"port {port} on {HOST} is already in use",
                    hint="pass --port with a free port (or --port 0 to pick one)",
                ) from exc
            raise errors.ConfigurationError(f"cannot listen on {HOST}:{port}: {exc}") from exc


def _make_server(port: int) -> Any:
    """moto's server app on a werkzeug server that handles one request at a time.

    moto's own server is threaded, and its conditional writes are then not atomic: two
    concurrent UpdateItems on a new item can both pass their condition (pinned in
    tests/integration/test_cli_servers.py). DynamoDB serialises writes to an item, and so does
    this server, by serving requests one by one (HTTP/1.0, one connection per request).
    """
    try:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server
    except ImportError as exc:
        raise errors.ConfigurationError(
            "the dev server needs the optional 'local' extra",
            hint=extras.hint("local"),
        ) from exc

    class OneAtATime(MotoRequestHandler):
        protocol_version = "HTTP/1.0"

    app = DomainDispatcherApplication(create_backend_app)
    return make_server(HOST, port, app, threaded=False, request_handler=OneAtATime)


def serve(port: int, ready: Callable[[str], None], stop: threading.Event | None = None) -> None:
    """Run until ``stop`` is set or SIGINT/SIGTERM arrives; call ``ready(url)`` once listening."""
    # One access-log line per request would drown the useful output.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    if port:
        _check_port(port)
    server = _make_server(port)
    thread = threading.Thread(target=server.serve_forever, name="dev-server", daemon=True)
    thread.start()
    host, actual = HOST, server.server_port
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        ready(f"http://{host}:{actual}")
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        thread.join(10)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
