"""A fault-injecting HTTP/1.1 proxy on loopback, for DynamoDB-compatible servers.

It reads each request from the client, decides what to do with it by its ``X-Amz-Target``
(e.g. ``DynamoDB_20120810.UpdateItem``) and its number, and then:

- ``pass``: forwards it and returns the answer;
- ``drop``: forwards it, lets the server apply it, then closes the client's connection without
  an answer (the request went through; the response was lost);
- ``reset``: forwards it, then resets the client's connection (RST) instead of answering;
- ``reset_before``: resets the client's connection without forwarding;
- ``delay:S``: forwards it and answers after S seconds (it lands at once, its answer is late);
- ``late:S``: forwards it after S seconds, then answers (it lands late);
- ``blackhole``: never forwards it and never answers (the connection stays open);
- ``drip:S``: forwards it, then sends the answer one byte every S seconds (every socket read
  gets data in time, so only a deadline on the whole answer stops it);
- ``throttle``: answers 400 ThrottlingException without forwarding;
- ``busy``: answers 400 ProvisionedThroughputExceededException without forwarding;
- ``denied``: answers 400 AccessDeniedException without forwarding.

It also counts requests per target, which the benchmark uses to count requests per operation.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections import Counter
from typing import Callable

Plan = Callable[[str, int], str]

_THROTTLE_BODIES = {
    "denied": (
        "AccessDeniedException",
        "User: arn:aws:iam::123456789012:user/ci is not authorized to perform this action",
    ),
    "gone": ("ResourceNotFoundException", "Requested resource not found"),
    "throttle": ("ThrottlingException", "Rate of requests exceeds the allowed throughput."),
    "busy": (
        "ProvisionedThroughputExceededException",
        "The level of configured provisioned throughput for the table was exceeded.",
    ),
}


def _read_message(sock: socket.socket, buffer: bytearray) -> bytes | None:
    """One HTTP message (head plus Content-Length or chunked body) from ``sock``; None on EOF."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk
    head_end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:head_end]).decode("latin-1").lower()
    length = 0
    chunked = False
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip() == "content-length":
            length = int(value.strip())
        elif name.strip() == "transfer-encoding" and "chunked" in value:
            chunked = True
    if chunked:
        while not buffer.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buffer += chunk
        message = bytes(buffer)
        del buffer[:]
        return message
    while len(buffer) < head_end + length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk
    message = bytes(buffer[: head_end + length])
    del buffer[: head_end + length]
    return message


#: A plain lock's acquire is a TransactWriteItems (the lock's item and its fence record) where
#: the endpoint has transactions, an UpdateItem where it has not (dynalite): plans and counts
#: see both as the lock's writes ("UpdateItem"), in the order they are sent.
SAME_AS = {"TransactWriteItems": "UpdateItem"}


def _operation(request: bytes) -> str:
    head = request.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    for line in head.split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "x-amz-target":
            return value.strip().rsplit(".", 1)[-1]
    return "?"


def _target(request: bytes) -> str:
    operation = _operation(request)
    return SAME_AS.get(operation, operation)


def _without_body(request: bytes, body: bytes) -> bytes:
    """``request`` with ``body`` instead of its own (Content-Length set to match)."""
    head = request.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    kept = [line for line in head if not line.lower().startswith(b"content-length:")]
    return b"\r\n".join([*kept, b"Content-Length: %d" % len(body)]) + b"\r\n\r\n" + body


def _reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _error_response(kind: str) -> bytes:
    code, message = _THROTTLE_BODIES[kind]
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message})
    data = body.encode()
    return (
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-amz-json-1.0\r\n"
        + f"Content-Length: {len(data)}\r\nx-amzn-RequestId: fault\r\n\r\n".encode()
        + data
    )


#: The steps of the server-side step programs (PostgreSQL's function, Redis's script), by which
#: their fault proxies (tests/pgproxy.py, tests/redisproxy.py) name a request.
STEPS = (
    "take", "renew", "end", "join", "beat", "leave", "read", "resize",
    "take_share", "renew_share", "end_share", "claim", "take_all", "renew_all", "end_all",
)  # fmt: skip


class FaultProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``upstream`` ("host", port)."""

    #: Requests carry no connection state (HTTP): one may go on a fresh upstream connection.
    stateless = True

    def __init__(self, upstream: tuple[str, int], plan: Plan | None = None) -> None:
        self.upstream = upstream
        self.plan: Plan = plan or (lambda target, n: "pass")
        self.counts: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        #: Client connections accepted so far.
        self.connections = 0
        self.on_fault: Callable[[str, str], None] | None = None
        self._lock = threading.Lock()
        #: Whether the upstream runs TransactWriteItems (None: not asked yet).
        self._transactions: bool | None = None
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(128)
        self.port = self._server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="faultproxy", daemon=True)
        self._thread.start()

    def url_for(self, url: str) -> str:
        """A store URL (postgresql://, redis://) pointed at the proxy, its user kept."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (userinfo + "@" if userinfo else "") + f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def reset_counts(self) -> None:
        with self._lock:
            self.counts.clear()
            self.faults.clear()

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        self._server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    # What a protocol decides (HTTP here; PostgreSQL's wire protocol in tests/pgproxy.py).

    def _open(self, client: socket.socket, inbox: bytearray) -> socket.socket | None:
        """The upstream connection, if the protocol opens one before the first request."""
        return None

    def _read_request(self, sock: socket.socket, buffer: bytearray) -> bytes | None:
        return _read_message(sock, buffer)

    def _read_response(self, sock: socket.socket, buffer: bytearray) -> bytes | None:
        return _read_message(sock, buffer)

    def _target(self, request: bytes) -> str:
        return _target(request)

    def _refusal(self, kind: str) -> bytes:
        """The answer of a refusing server ("throttle", "busy", "denied", "gone")."""
        return _error_response(kind)

    def _forwarded(
        self,
        target: str,
        client: socket.socket,
        upstream: socket.socket,
        inbox: bytearray,
        outbox: bytearray,
    ) -> bool:
        """After an answer went back: True if the protocol served the connection to its end
        itself (Redis's subscriptions, whose messages come unasked)."""
        return False

    def _unplanned(self, request: bytes) -> bool:
        """A request the plan never sees and the counts leave out: a plain acquire's
        TransactWriteItems sent to an upstream without transactions (dynalite answers it
        UnknownOperationException, and the client sends the lock's UpdateItem instead, which the
        plan sees). So a plan meets the same writes in the same order on every server."""
        if _operation(request) != "TransactWriteItems":
            return False
        if self._transactions is None:
            # Asked once, with an empty transaction: refused as invalid where transactions
            # exist, as an unknown operation where they do not.
            with socket.create_connection(self.upstream, timeout=10) as probe:
                probe.sendall(_without_body(request, b'{"TransactItems":[]}'))
                answer = _read_message(probe, bytearray()) or b""
            self._transactions = b"UnknownOperationException" not in answer
        return not self._transactions

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        inbox, outbox = bytearray(), bytearray()
        client.settimeout(60)
        try:
            upstream = self._open(client, inbox)
            while not self._stop.is_set():
                request = self._read_request(client, inbox)
                if request is None:
                    return
                target = self._target(request)
                with self._lock:
                    if self._unplanned(request):
                        action = "pass"
                    else:
                        self.counts[target] += 1
                        action = self.plan(target, self.counts[target])
                    if action != "pass":
                        self.faults[action.split(":")[0]] += 1
                if action in _THROTTLE_BODIES:
                    client.sendall(self._refusal(action))
                    continue
                if action == "reset_before":
                    _reset(client)
                    return
                if action == "blackhole":
                    while not self._stop.is_set() and client.recv(65536):
                        pass
                    return
                if action.startswith("late:"):
                    time.sleep(float(action.split(":", 1)[1]))
                    if upstream is not None and self.stateless:
                        # The server may have closed an idle connection meanwhile (dynalite's
                        # keep-alive lasts 5 s): a late request goes on a fresh one.
                        upstream.close()
                        upstream = None
                if upstream is None:
                    upstream = socket.create_connection(self.upstream, timeout=60)
                upstream.sendall(request)
                response = self._read_response(upstream, outbox)
                if response is None:
                    return
                if self.on_fault is not None and action != "pass":
                    self.on_fault(target, action)
                if action == "drop":
                    client.close()
                    return
                if action == "reset":
                    _reset(client)
                    return
                if action.startswith("delay:"):
                    time.sleep(float(action.split(":", 1)[1]))
                if action.startswith("drip:"):
                    pause = float(action.split(":", 1)[1])
                    for i in range(len(response)):
                        if self._stop.is_set():
                            return
                        client.sendall(response[i : i + 1])
                        time.sleep(pause)
                    continue
                client.sendall(response)
                if self._forwarded(target, client, upstream, inbox, outbox):
                    return
        except OSError:
            return
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()
