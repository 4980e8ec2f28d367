"""The fault-injecting proxy (tests/faultproxy.py) for PostgreSQL's wire protocol.

The connection's start (SSL refused by the proxy itself, then the startup message and the
password exchange) passes untouched. From the first ReadyForQuery on, a *request* is what the
client sends up to a Sync or a simple Query, and its *answer* is what the server sends up to
the next ReadyForQuery; each request is named by its target, the awsflock step it calls (the
step function's first argument: "take", "renew", "end", ..., ``faultproxy.STEPS``) or "sql"
for any other statement, and then passed, dropped, reset, delayed, made late or blackholed as
``FaultProxy`` does. ``drop`` is a committed statement whose answer was
lost: the server ran it (in autocommit) and the client's connection is closed. ``throttle``
and ``busy`` answer a serialization failure (SQLSTATE 40001) without forwarding.
"""

from __future__ import annotations

import select
import socket
import struct

from tests.faultproxy import STEPS, FaultProxy

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104


def _fill(sock: socket.socket, buffer: bytearray, size: int) -> bool:
    while len(buffer) < size:
        chunk = sock.recv(65536)
        if not chunk:
            return False
        buffer += chunk
    return True


def _message(sock: socket.socket, buffer: bytearray) -> bytes | None:
    """One typed message (type byte, int32 length, body) from ``sock``; None on EOF."""
    if not _fill(sock, buffer, 5):
        return None
    size = 1 + struct.unpack("!I", bytes(buffer[1:5]))[0]
    if not _fill(sock, buffer, size):
        return None
    message = bytes(buffer[:size])
    del buffer[:size]
    return message


def _until_ready(sock: socket.socket, buffer: bytearray) -> bytes | None:
    """The server's messages up to and including its next ReadyForQuery."""
    out = bytearray()
    while True:
        message = _message(sock, buffer)
        if message is None:
            return None
        out += message
        if message[:1] == b"Z":
            return bytes(out)


def target_of(request: bytes) -> str:
    """The awsflock step a request calls (its Bind's first parameter), else "sql"."""
    at = 0
    while at + 5 <= len(request):
        kind = request[at : at + 1]
        size = struct.unpack("!I", request[at + 1 : at + 5])[0]
        body = request[at + 5 : at + 1 + size]
        if kind == b"B":
            portal_end = body.index(b"\0")
            statement_end = body.index(b"\0", portal_end + 1)
            pos = statement_end + 1
            formats = struct.unpack("!H", body[pos : pos + 2])[0]
            pos += 2 + 2 * formats
            count = struct.unpack("!H", body[pos : pos + 2])[0]
            pos += 2
            if count:
                length = struct.unpack("!i", body[pos : pos + 4])[0]
                first = body[pos + 4 : pos + 4 + max(length, 0)].decode("utf-8", "replace")
                return first if first in STEPS else "sql"
        at += 1 + size
    return "sql"


class PgFaultProxy(FaultProxy):
    """A FaultProxy in front of a PostgreSQL server."""

    #: A PostgreSQL session lives on its connection (its start-up, its settings).
    stateless = False

    def _open(self, client: socket.socket, inbox: bytearray) -> socket.socket | None:
        # SSL and GSS encryption are refused here ('N'), as a server without them does.
        while True:
            if not _fill(client, inbox, 8):
                raise OSError("client gone at start")
            size, code = struct.unpack("!II", bytes(inbox[:8]))
            if code in (_SSL_REQUEST, _GSS_REQUEST) and size == 8:
                del inbox[:8]
                client.sendall(b"N")
                continue
            break
        if not _fill(client, inbox, size):
            raise OSError("client gone at start")
        upstream = socket.create_connection(self.upstream, timeout=60)
        try:
            return self._start(client, upstream, inbox, size)
        except OSError:
            upstream.close()
            raise

    def _start(
        self, client: socket.socket, upstream: socket.socket, inbox: bytearray, size: int
    ) -> socket.socket:
        upstream.sendall(bytes(inbox[:size]))
        del inbox[:size]
        # The password exchange: the client's bytes pass as they come; the server's are read
        # message by message until its first ReadyForQuery.
        answer = bytearray()
        while True:
            ready, _, _ = select.select([client, upstream], [], [], 30)
            if not ready:
                raise OSError("start-up stalled")
            if client in ready:
                chunk = client.recv(65536)
                if not chunk:
                    raise OSError("client gone at start")
                upstream.sendall(chunk)
            if upstream in ready:
                chunk = upstream.recv(65536)
                if not chunk:
                    raise OSError("server gone at start")
                client.sendall(chunk)
                answer += chunk
                if _ready_for_query(answer):
                    return upstream

    def _read_request(self, sock: socket.socket, buffer: bytearray) -> bytes | None:
        out = bytearray()
        while True:
            message = _message(sock, buffer)
            if message is None or message[:1] == b"X":  # gone, or Terminate
                return None
            out += message
            if message[:1] in (b"S", b"Q"):
                return bytes(out)

    def _read_response(self, sock: socket.socket, buffer: bytearray) -> bytes | None:
        return _until_ready(sock, buffer)

    def _target(self, request: bytes) -> str:
        return target_of(request)

    def _refusal(self, kind: str) -> bytes:
        """A refusal the server did not make: "throttle" and "busy" are a serialization
        failure (SQLSTATE 40001, which awsflock retries), "denied" a missing privilege."""
        code, text = (
            ("42501", "permission denied (injected)")
            if kind == "denied"
            else (
                "40001",
                "could not serialize access (injected)",
            )
        )
        fields = (
            b"".join(
                tag + value.encode() + b"\0"
                for tag, value in ((b"S", "ERROR"), (b"V", "ERROR"), (b"C", code), (b"M", text))
            )
            + b"\0"
        )
        error = b"E" + struct.pack("!I", 4 + len(fields)) + fields
        return error + b"Z" + struct.pack("!I", 5) + b"I"


def _ready_for_query(stream: bytearray) -> bool:
    """Whether the server's bytes so far hold a whole ReadyForQuery message."""
    at = 0
    while at + 5 <= len(stream):
        size = struct.unpack("!I", bytes(stream[at + 1 : at + 5]))[0]
        if at + 1 + size > len(stream):
            return False
        if stream[at : at + 1] == b"Z":
            return True
        at += 1 + size
    return False
