"""The Redis store under faults of the wire, through a proxy for Redis's protocol
(tests/redisproxy.py), with the real ``awsflock`` executable: a step the server ran whose
answer was lost (a take that lands after its acquire gave up: test_late_takes.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Callable

import pytest

from tests.integration.conftest import UrlCli
from tests.redisproxy import RedisFaultProxy, target_of
from tests.servers import RedisServer


@pytest.fixture
def faulty(redis_server: RedisServer) -> Iterator[Callable[..., tuple[UrlCli, RedisFaultProxy]]]:
    """``faulty(plan)``: the CLI through a proxy that runs ``plan``, and the proxy."""
    proxies: list[RedisFaultProxy] = []

    def make(plan: Callable[[str, int], str]) -> tuple[UrlCli, RedisFaultProxy]:
        proxy = RedisFaultProxy(("127.0.0.1", redis_server.port), plan)
        proxies.append(proxy)
        return UrlCli(redis_server, "awsflock", proxy.url_for(redis_server.url)), proxy

    yield make
    for proxy in proxies:
        proxy.close()


@pytest.fixture
def direct(redis_server: RedisServer) -> UrlCli:
    return UrlCli(redis_server, "awsflock")


def test_the_proxy_names_each_step_of_the_script():
    words = [b"EVALSHA", b"abc", b"2", b"k:1", b"k:2", b"take", b"{}"]
    call = b"*7\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)
    assert target_of(call) == "take"
    assert target_of(b"*2\r\n$4\r\nWAIT\r\n$1\r\n0\r\n") == "wait"


def test_a_take_whose_answer_was_lost_after_the_script_ran_is_our_grant(
    faulty, direct: UrlCli, lock_name: str
):
    cli, proxy = faulty(lambda target, n: "drop" if target == "take" and n == 1 else "pass")
    got = cli("acquire", lock_name, "--lease-duration", "60s", "--wait-time", "10")
    assert got.returncode == 0, got.stderr
    assert proxy.faults["drop"] == 1
    lease_id = got.stdout.strip()
    # The first try landed: the lock holds its LEASE_ID, found by the retry, and nothing else.
    status = json.loads(direct("status", lock_name, "--json").stdout)
    assert status["state"] == "held"
    assert direct("renew", lock_name, lease_id, "--lease-duration", "60s").returncode == 0
    assert direct("release", lock_name, lease_id).returncode == 0
    assert direct("acquire", lock_name, "--no-wait").returncode == 0


def test_a_release_whose_answer_was_lost_is_released_when_retried(
    faulty, direct: UrlCli, lock_name: str
):
    lease_id = direct("acquire", lock_name, "--lease-duration", "60s").stdout.strip()
    cli, proxy = faulty(lambda target, n: "drop" if target == "end" and n == 1 else "pass")
    gone = cli("release", lock_name, lease_id)
    assert gone.returncode == 0, gone.stderr
    assert proxy.faults["drop"] == 1
    assert direct("acquire", lock_name, "--no-wait").returncode == 0


def test_a_busy_answer_to_the_settings_check_is_retried_not_called_a_refusal(
    faulty, lock_name: str
):
    # CONFIG GET answered BUSY (a script running) says nothing of the user's rights: taking it
    # for a refusal made acquire, or the release at the end of `run`, fail as "could not check".
    cli, proxy = faulty(lambda target, n: "busy" if target == "config" and n == 1 else "pass")
    got = cli("acquire", lock_name, "--no-wait")
    assert got.returncode == 0, got.stderr
    assert proxy.faults["busy"] == 1
    assert "could not check" not in got.stderr
