"""The fault-injecting proxy (tests/faultproxy.py) for Redis's protocol (RESP).

A *request* is one command (an array of bulk strings, as redis-py sends every command, also in
a pipeline) and its *answer* the one reply the server sends for it. Each request is named by its
target: the awsflock step a call of the step script makes (its first argument: "take",
"renew", "end", ..., ``faultproxy.STEPS``), else the command's name in lower
case ("wait", "config", "hello", "set", ...). Then it is passed, dropped, reset, delayed, made
late or blackholed as ``FaultProxy`` does: ``drop`` is a script the server ran whose answer was
lost (the client's connection is closed). ``busy`` and ``throttle`` answer BUSY, ``denied``
NOPERM, ``gone`` NOSCRIPT, without forwarding.

A connection that subscribes (a waiter's) is piped both ways from then on: the server pushes
its messages unasked.
"""

from __future__ import annotations

import contextlib
import select
import socket

from tests.faultproxy import STEPS, FaultProxy


def _line(sock: socket.socket, buffer: bytearray) -> bytes | None:
    """One CRLF-ended line from ``sock`` (without the CRLF); None on EOF."""
    while True:
        at = buffer.find(b"\r\n")
        if at >= 0:
            line = bytes(buffer[:at])
            del buffer[: at + 2]
            return line
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk


def _exactly(sock: socket.socket, buffer: bytearray, size: int) -> bytes | None:
    while len(buffer) < size:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk
    data = bytes(buffer[:size])
    del buffer[:size]
    return data


def _value(sock: socket.socket, buffer: bytearray, out: bytearray) -> bool:
    """Read one RESP2/RESP3 value into ``out`` (raw bytes); False on EOF."""
    line = _line(sock, buffer)
    if line is None:
        return False
    out += line + b"\r\n"
    kind, rest = line[:1], line[1:]
    if kind in (b"$", b"=", b"!"):
        size = int(rest)
        if size >= 0:
            data = _exactly(sock, buffer, size + 2)
            if data is None:
                return False
            out += data
        return True
    if kind in (b"*", b"~", b">", b"%", b"|"):
        count = int(rest)
        if kind in (b"%", b"|"):
            count *= 2
        return all(_value(sock, buffer, out) for _ in range(max(count, 0)))
    return True  # + - : _ , # ( : one line


def _words(request: bytes) -> list[bytes]:
    """The arguments of one command as sent (an array of bulk strings)."""
    words, at = [], request.index(b"\r\n") + 2
    while at < len(request):
        end = request.index(b"\r\n", at)
        size = int(request[at + 1 : end])
        words.append(request[end + 2 : end + 2 + size])
        at = end + 2 + size + 2
    return words


def target_of(request: bytes) -> str:
    """The awsflock step a call of the step script makes, else the command's name."""
    words = _words(request)
    if not words:
        return "?"
    name = words[0].decode("latin-1").lower()
    if name in ("eval", "evalsha") and len(words) >= 4 and words[2].isdigit():
        at = 3 + int(words[2])
        step = words[at].decode("latin-1") if at < len(words) else ""
        if step in STEPS:
            return step
    return name


class RedisFaultProxy(FaultProxy):
    """A FaultProxy in front of a Redis server."""

    #: A Redis connection carries state (AUTH, SELECT): a late command goes on its own one.
    stateless = False

    def _open(self, client: socket.socket, inbox: bytearray) -> socket.socket | None:
        return socket.create_connection(self.upstream, timeout=60)

    def _read_request(self, sock: socket.socket, buffer: bytearray) -> bytes | None:
        out = bytearray()
        return bytes(out) if _value(sock, buffer, out) else None

    def _read_response(self, sock: socket.socket, buffer: bytearray) -> bytes | None:
        out = bytearray()
        return bytes(out) if _value(sock, buffer, out) else None

    def _target(self, request: bytes) -> str:
        return target_of(request)

    def _refusal(self, kind: str) -> bytes:
        return {
            "busy": b"-BUSY Redis is busy running a script (injected)\r\n",
            "throttle": b"-BUSY Redis is busy running a script (injected)\r\n",
            "denied": b"-NOPERM this user has no permissions to run the command (injected)\r\n",
            "gone": b"-NOSCRIPT No matching script. Please use EVAL. (injected)\r\n",
        }[kind]

    def _forwarded(
        self,
        target: str,
        client: socket.socket,
        upstream: socket.socket,
        inbox: bytearray,
        outbox: bytearray,
    ) -> bool:
        """After a SUBSCRIBE: pipe both ways until either side closes (True: done)."""
        if "subscribe" not in target:
            return False
        for sock, pending in ((upstream, inbox), (client, outbox)):
            if pending:
                sock.sendall(bytes(pending))
                pending.clear()
        with contextlib.suppress(OSError):
            while not self._stop.is_set():
                ready, _, _ = select.select([client, upstream], [], [], 0.2)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return True
                    (upstream if sock is client else client).sendall(data)
        return True
