"""What answers in DynamoDB's place, told apart from DynamoDB so that the caller hears "not a
DynamoDB endpoint" (nothing applied) instead of "may have been granted".

An HTTP answer that cannot be DynamoDB's (``check_answer``, a botocore hook: no request id and
no JSON object, or empty) is raised as ``ForeignAnswer`` before botocore reads it as one.

An ``--endpoint-url`` that closed the connection without an HTTP answer (``not_http``) is shown
to speak another protocol by two signs, both positive proof (silence proves nothing: a DynamoDB
endpoint whose connection dropped after the request arrived may have applied it):

- the answer's first line is not an HTTP status line (an SSH banner, a Redis error): every
  HTTP server and proxy, and so anything that could have passed our request on to DynamoDB,
  starts its answer with ``HTTP/``;
- the endpoint closed without a byte, or reset the connection (Redis closes anything that
  looks like HTTP, and the close is a reset when our request's body arrived after its first
  line was read), and on a new connection answers a Redis ``PING`` in Redis's protocol.
"""

from __future__ import annotations

import json
import socket
from typing import Any
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
    closed = name == "RemoteDisconnected" or isinstance(reason, _CLOSED)
    if closed and _answers_redis(endpoint_url):
        host = urlsplit(endpoint_url)
        url = f"redis://{host.hostname}:{host.port or 6379}"
        return f"it answers as a Redis server; for a Redis store, use --store {url}"
    return None


#: What a connection closed under our request is raised as when the close was a reset.
_CLOSED = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)

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


class ForeignAnswer(Exception):
    """An HTTP answer that is not DynamoDB's (``check_answer``): ``status``, and whether it
    came back empty (which DynamoDB's never do: an answer cut short, in doubt)."""

    def __init__(self, status: int, *, empty: bool = False) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.empty = empty


#: 5xx answers that say the request was not taken up (not implemented, HTTP version not
#: supported, network sign-in needed). Any other 5xx may come from a proxy or load balancer that
#: forwarded the request to DynamoDB first: in doubt, whoever answered.
_NOT_TAKEN_UP = (501, 505, 511)


def check_answer(response_dict: dict[str, Any], **_: Any) -> None:
    """A botocore ``before-parse`` handler: raise ForeignAnswer for an answer that cannot be
    DynamoDB's, before botocore reads it as one (an empty 200 would pass for a granted
    transaction). DynamoDB's answers, and those of the servers that stand in for it, carry a
    request id, or at least a JSON object; a 5xx that may come after a forward is left alone."""
    headers = response_dict.get("headers") or {}
    if "x-amzn-requestid" in headers:
        return
    status = int(response_dict.get("status_code") or 0)
    if status >= 500 and status not in _NOT_TAKEN_UP:
        return
    body = response_dict.get("body") or b""
    if not body:
        raise ForeignAnswer(status, empty=True)
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ForeignAnswer(status)
