"""What answered an ``--endpoint-url`` that closed the connection without an HTTP answer: when
it is shown to speak another protocol, no request of ours can have been applied by DynamoDB
there, and the caller is told "not a DynamoDB endpoint" instead of "may have been granted".

Two signs, both positive proof (silence proves nothing: a DynamoDB endpoint whose connection
dropped after the request arrived may have applied it):

- the answer's first line is not an HTTP status line (an SSH banner, a Redis error): every
  HTTP server and proxy, and so anything that could have passed our request on to DynamoDB,
  starts its answer with ``HTTP/``;
- the endpoint closed without a byte (Redis does that to anything that looks like HTTP), and
  on a new connection answers a Redis ``PING`` in Redis's protocol.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

#: The longest the Redis probe may take (connect, send, first answer), in seconds.
PROBE_S = 0.5
PING = b"*1\r\n$4\r\nPING\r\n"


def not_http(error: BaseException | None, endpoint_url: str | None) -> str | None:
    """What answered instead of DynamoDB, said for a message ("a Redis server"), when botocore's
    ``ConnectionClosedError`` carrying ``error`` shows the endpoint does not speak HTTP; None
    when nothing shows that."""
    if not endpoint_url or error is None:
        return None
    reason = error.args[1] if len(error.args) > 1 else None
    name = type(reason).__name__
    if name == "BadStatusLine" and reason is not None:
        line = str(reason.args[0] if reason.args else "").strip()
        if line and not line.startswith("HTTP/"):
            return f"it answered {_shown(line)}, which is not HTTP"
    if name == "RemoteDisconnected" and _answers_redis(endpoint_url):
        host = urlsplit(endpoint_url)
        url = f"redis://{host.hostname}:{host.port or 6379}"
        return f"it answers as a Redis server; for a Redis store, use --store {url}"
    return None


#: Endpoints probed by this process, and what was found: a command whose every try is closed
#: without an answer probes once, not once a try (a probe of a silent server costs PROBE_S).
_PROBED: dict[str, bool] = {}


def _answers_redis(endpoint_url: str) -> bool:
    """Whether the endpoint answers a Redis PING in Redis's protocol (``+PONG``, or an error
    such as ``-NOAUTH``): something no HTTP server sends."""
    if endpoint_url not in _PROBED:
        _PROBED[endpoint_url] = _probe(endpoint_url)
    return _PROBED[endpoint_url]


def _probe(endpoint_url: str) -> bool:
    parts = urlsplit(endpoint_url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    try:
        with socket.create_connection((parts.hostname, parts.port or 80), PROBE_S) as conn:
            conn.settimeout(PROBE_S)
            conn.sendall(PING)
            first = conn.recv(64)
    except (OSError, ValueError):
        return False
    return first.startswith((b"+PONG", b"-NOAUTH", b"-ERR", b"-WRONGPASS", b"-DENIED"))


def _shown(line: str) -> str:
    text = line if len(line) <= 40 else line[:39] + "…"
    return repr(text)
