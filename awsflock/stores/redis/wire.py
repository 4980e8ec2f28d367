"""A step's commands on the wire: packed here (RESP), written on the client's one connection in
one send (a step's without taking the connection out of redis-py's pool and giving it back,
which costs about 30 µs a step with redis-py 8), and their replies read raw, each in turn, an
error among them returned in its place (as redis-py's pipeline gives them with
``raise_on_error=False``).

A step sends two or three commands on every lock operation; redis-py's pipeline and client
layers (command objects, response callbacks, retries we turn off anyway) cost about 0.2 ms of
CPU a step over this (measured with ``time.thread_time``: docs/performance.md). The reply
parser, the socket, its timeouts and TLS stay redis-py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: One command: its name's words and its arguments (str, bytes or int).
Command = Sequence[Any]


def pack(commands: Sequence[Command]) -> bytes:
    """The commands as RESP arrays of bulk strings, one buffer."""
    out: list[bytes] = []
    for command in commands:
        out.append(b"*%d\r\n" % len(command))
        for arg in command:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def call(client: Any, commands: Sequence[Command]) -> list[Any]:
    """``send`` on ``client``'s connection, taken out of its pool for the call."""
    pool = client.connection_pool
    conn = checkout(pool)
    try:
        return send(conn, commands)
    finally:
        pool.release(conn)


def send(conn: Any, commands: Sequence[Command]) -> list[Any]:
    """Each command's raw reply (an error reply as its exception), sent together on ``conn``
    (a redis-py connection). A failure of the connection itself is raised, the connection
    closed: its replies can no longer be told apart.

    redis-py raises some error replies as connection errors, and closes the connection
    (``LOADING``, ``NOAUTH``, ``WRONGPASS``): such a reply is still the reply in its place, so
    that a step's answer read before it stands (a command after the step refused is not the
    step refused); the commands after it have none (a ``ConnectionError`` each)."""
    import redis.exceptions as rx

    try:
        conn.send_packed_command([pack(commands)], check_health=False)
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except rx.ResponseError as refused:
                replies.append(refused)
            except _raised_replies() as refused:
                replies.append(refused)
                closed = rx.ConnectionError("the connection was closed after an error reply")
                replies.extend(closed for _ in commands[len(replies) :])
                # The replies after it are unread: closed here, whatever redis-py did, so that
                # the next step on this connection never reads them as its own.
                conn.disconnect()
                break
    except BaseException:
        conn.disconnect()
        raise
    return replies


def _raised_replies() -> tuple[type[BaseException], ...]:
    """The error replies redis-py raises as connection errors (not connection failures)."""
    import redis.exceptions as rx

    return (rx.BusyLoadingError, rx.AuthenticationError)


def checkout(pool: Any) -> Any:
    """``pool``'s connection, taken out of it (give it back with ``pool.release``). redis-py
    before 5.3 wants a command's name there (any name: a plain pool ignores it); later ones
    want none, and warn that the argument is deprecated. (Awaited: ``checkout_async``.)"""
    return pool.get_connection(*checkout_args(pool))


async def checkout_async(pool: Any) -> Any:
    """``checkout`` of a ``redis.asyncio`` pool."""
    return await pool.get_connection(*checkout_args(pool))


def checkout_args(pool: Any) -> tuple[str, ...]:
    """What ``pool.get_connection`` is given (see ``checkout``)."""
    return ("EVALSHA",) if _wants_a_name(pool.get_connection) else ()


#: By pool method: whether it wants the command's name.
_NAMED: dict[Any, bool] = {}


def _wants_a_name(method: Any) -> bool:
    key = getattr(method, "__func__", method)
    if key not in _NAMED:
        import inspect

        named = inspect.signature(method).parameters.get("command_name")
        _NAMED[key] = named is not None and named.default is inspect.Parameter.empty
    return _NAMED[key]
