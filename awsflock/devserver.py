"""``awsflock dev-server``: a DynamoDB-compatible endpoint on loopback, for trying awsflock and
testing scripts without AWS. It is moto's server, in memory, so everything is gone when it stops.
Needs the optional extra: ``pip install 'awsflock[local]'``.
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
import threading
from typing import Any, Callable

from awsflock import errors

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


def _server_class() -> Any:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise errors.ConfigurationError(
            "the dev server needs the optional 'local' extra",
            hint="pip install 'awsflock[local]' (or: pipx inject awsflock 'moto[server]')",
        ) from exc
    return ThreadedMotoServer


def serve(port: int, ready: Callable[[str], None], stop: threading.Event | None = None) -> None:
    """Run until ``stop`` is set or SIGINT/SIGTERM arrives; call ``ready(url)`` once listening."""
    server_class = _server_class()
    # One access-log line per request would drown the useful output.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    if port:
        _check_port(port)
    server = server_class(ip_address=HOST, port=port, verbose=False)
    server.start()
    host, actual = server.get_host_and_port()
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
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
