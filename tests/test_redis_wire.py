"""A step's commands on the wire (awsflock/stores/redis/wire.py), with a fake connection: what
each reply becomes, and what the link makes of replies behind an applied step."""

from __future__ import annotations

from typing import Any

import pytest

redis = pytest.importorskip("redis")

from awsflock import errors  # noqa: E402
from awsflock.stores.redis import wire  # noqa: E402


class Conn:
    """A connection answering with ``replies`` in turn (an exception is raised, as redis-py's
    parser raises it), and closing itself after one, as redis-py does."""

    def __init__(self, replies: list[Any], closes_itself: bool = True) -> None:
        self.replies = list(replies)
        self.sent: list[bytes] = []
        self.closed = 0
        self.closes_itself = closes_itself

    def send_packed_command(self, data: list[bytes], check_health: bool = True) -> None:
        self.sent.extend(data)

    def read_response(self) -> Any:
        if self.closed:
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            if self.closes_itself and not isinstance(reply, redis.exceptions.ResponseError):
                self.closed += 1
            raise reply
        return reply

    def disconnect(self) -> None:
        self.closed += 1


class Pool:
    def __init__(self, conn: Conn) -> None:
        self.conn, self.released = conn, 0

    def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Conn:
        return self.conn

    def release(self, conn: Conn) -> None:
        self.released += 1


def client_of(*replies: Any) -> Any:
    return type("Client", (), {"connection_pool": Pool(Conn(list(replies)))})()


def test_a_step_is_sent_through_a_pool_of_redis_py_5_0_and_of_today():
    # redis-py 5.0 to 5.2 want a command's name in ConnectionPool.get_connection; later ones
    # want none and warn that it is deprecated. pyproject allows redis>=5: a step works on both.
    class OldPool(Pool):
        def get_connection(self, command_name: str, *keys: Any, **options: Any) -> Conn:
            return self.conn

    class NewPool(Pool):
        def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Conn:
            assert command_name is None, "the deprecated argument was given"
            return self.conn

    for pool in (OldPool(Conn([b"OK", b"OK"])), NewPool(Conn([b"OK", b"OK"]))):
        client = type("Client", (), {"connection_pool": pool})()
        assert wire.call(client, [("SET", "k", 1), ("GET", "k")]) == [b"OK", b"OK"]
        assert pool.conn.sent == [
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
        ]
        assert pool.released == 1


@pytest.mark.parametrize(
    "raised",
    [
        redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
        redis.exceptions.AuthenticationError("Authentication required."),
    ],
)
def test_an_error_reply_redis_py_raises_behind_an_answered_step_is_that_reply(raised):
    # LOADING and NOAUTH replies are raised by redis-py as connection errors: behind a step
    # the server ran, they were taken for the step's own failure (never applied).
    client = client_of([1, b"7", []], raised, b"unread")
    replies = wire.call(client, [("EVALSHA", "x", 0), ("INFO",), ("CONFIG", "GET", "x")])
    assert replies[0] == [1, b"7", []]
    assert replies[1] is raised
    assert isinstance(replies[2], redis.exceptions.ConnectionError)


def test_replies_left_unread_behind_an_error_reply_close_the_connection():
    # The step connection is kept (not taken out of a pool that would check it for unread
    # data): a redis-py that raised LOADING without closing must not leave the INFO behind it
    # for the next step to read as its own answer.
    conn = Conn([[1, b"7", []], redis.exceptions.BusyLoadingError("loading"), b"unread"], False)
    replies = wire.send(conn, [("EVALSHA", "x", 0), ("CONFIG", "GET", "x"), ("INFO",)])
    assert isinstance(replies[2], redis.exceptions.ConnectionError)
    assert conn.closed == 1


def test_an_asyncio_pool_of_redis_py_5_0_is_given_a_command_name():
    # redis-py 5.0 to 5.2's asyncio pool wants one too (found by an adversarial review: every
    # awsflock.aio acquire on Redis failed with a TypeError there).
    import asyncio

    class OldPool:
        async def get_connection(self, command_name: str, *keys: Any, **options: Any) -> str:
            return f"connection for {command_name}"

    class NewPool:
        async def get_connection(self, command_name: Any = None, *keys: Any, **o: Any) -> str:
            assert command_name is None, "the deprecated argument was given"
            return "connection"

    assert asyncio.run(wire.checkout_async(OldPool())) == "connection for EVALSHA"
    assert asyncio.run(wire.checkout_async(NewPool())) == "connection"


def test_a_step_answered_then_its_settings_unreadable_may_have_been_applied():
    from awsflock.stores.redis import deployment
    from awsflock.stores.redis.link import Plan, RedisConn, RedisLink

    store = type("Store", (), {"url": "redis://h:6379/0", "prefix": "p"})()
    link = RedisLink(store)
    conn = RedisConn(client=None)
    conn.facts = deployment.Server((7, 0), "master", 0, "yes", "always")
    conn.deployment = object()  # type: ignore[assignment]
    loading = redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory")
    plan = Plan([("EVALSHA", "x", 0), ("CONFIG", "GET", "x"), ("INFO",)], None, 2)
    with pytest.raises(errors.EndpointUnreachable) as caught:
        link.read(conn, plan, [[1, b"7", []], loading, redis.exceptions.ConnectionError()])
    assert caught.value.maybe_applied


def test_a_connection_that_fails_while_reading_is_raised_and_closed():
    client = client_of([1, b"7", []], redis.exceptions.ConnectionError("reset"))
    with pytest.raises(redis.exceptions.ConnectionError):
        wire.call(client, [("EVALSHA", "x", 0), ("INFO",)])
    assert client.connection_pool.conn.closed >= 1
