"""The Redis store without a server: its URLs, the deployment classes and the translation of
redis-py's errors (tests/integration/test_redis.py has the real server)."""

from __future__ import annotations

import dataclasses

import pytest

from awsflock import errors
from awsflock.stores import kinds
from awsflock.stores.redis import deployment, layout
from awsflock.stores.redis.translate import translate

WHERE = "Redis at h:6379/0"


def _server(**overrides: object) -> deployment.Server:
    facts: dict[str, object] = {
        "version": (7, 0, 15),
        "role": "master",
        "replicas": 0,
        "appendonly": "yes",
        "appendfsync": "always",
    }
    facts.update(overrides)
    return deployment.Server(**facts)  # type: ignore[arg-type]


def _classify(declared: str = "", replicas: int = 0, **overrides: object):
    return deployment.classify(
        _server(**overrides), declared=declared, replicas=replicas, where=WHERE
    )


# -- the deployment classes -----------------------------------------------------------------------


def test_fsync_always_without_replicas_is_crash_safe_and_waits_for_nothing():
    found = _classify()
    assert (found.kind, found.waitaof, found.waits, found.checked) == (
        deployment.CRASH_SAFE,
        False,
        False,
        True,
    )
    assert found.notes == ()


def test_waiting_for_replicas_makes_it_durable_and_every_step_waits():
    found = deployment.classify(_server(replicas=2), declared="", replicas=2, where=WHERE)
    assert (found.kind, found.replicas, found.waits, found.waitaof) == (
        deployment.DURABLE,
        2,
        True,
        False,
    )


def test_replicas_left_unwaited_for_are_refused_unless_the_url_accepts_the_failover_risk():
    # Found by an adversarial review: a replica promoted after the primary died lacked a grant
    # the primary had acknowledged, and the lock was granted again.
    with pytest.raises(errors.ConfigurationError, match="a failover to one of them can lose"):
        deployment.classify(_server(replicas=1), declared="", replicas=0, where=WHERE)
    found = deployment.classify(
        _server(replicas=1), declared=deployment.ACCEPT_BEST_EFFORT, replicas=0, where=WHERE
    )
    assert found.kind == deployment.CRASH_SAFE
    assert any("failover" in note and "replicas=1" in note for note in found.notes)


def test_redis_72_checks_each_step_with_waitaof_but_still_needs_fsync_always():
    found = _classify(version=(7, 2, 4))
    assert found.waitaof and found.waits and found.kind == deployment.CRASH_SAFE
    # Found by the adversarial review: with everysec, Valkey 8.1 answered WAITAOF "fsynced" for
    # writes no fsync had followed (strace: 17 of 20 steps); so WAITAOF is a second check only.
    with pytest.raises(errors.ConfigurationError, match=r"best effort .*appendfsync everysec"):
        _classify(version=(7, 2, 4), appendfsync="everysec")
    # And it does not stand in for CONFIG GET: eviction cannot be seen without it.
    blocked = {"appendonly": None, "appendfsync": None, "config_error": "NOPERM config|get"}
    with pytest.raises(errors.ConfigurationError, match="could not check"):
        _classify(version=(7, 2, 4), **blocked)
    declared = _classify(version=(7, 2, 4), declared=deployment.DECLARE_FSYNC, **blocked)
    assert declared.waitaof and not declared.checked


def test_fsyncs_skipped_while_a_child_saves_are_best_effort():
    with pytest.raises(errors.ConfigurationError, match="no-appendfsync-on-rewrite yes"):
        _classify(no_fsync_on_rewrite="yes")
    with pytest.raises(errors.ConfigurationError, match="no-appendfsync-on-rewrite yes"):
        _classify(no_fsync_on_rewrite="yes", declared=deployment.DECLARE_FSYNC)


def test_an_aof_rewrite_is_waited_out_unless_waitaof_waits():
    # Found by the adversarial reviews: after CONFIG SET appendonly yes, until the first rewrite
    # is done, writes go to a file no manifest names; a crash then lost an acknowledged grant.
    # INFO shows no difference from a routine rewrite (not even aof_base_size, which keeps an
    # earlier rewrite's value), so without WAITAOF every rewrite is waited out.
    with pytest.raises(errors.Throttled, match="rewriting its AOF"):
        _classify(aof_rewriting=True)
    assert _classify(version=(7, 2, 4), aof_rewriting=True).waitaof


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"appendonly": "no"}, "appendonly no"),
        ({"appendfsync": "everysec"}, "appendfsync everysec"),
        ({"appendfsync": "no"}, "appendfsync no"),
        ({"version": (7, 2, 0), "appendonly": "no"}, "appendonly no"),
        ({"version": (7, 2, 0), "appendfsync": "everysec"}, "appendfsync everysec"),
    ],
)
def test_best_effort_is_refused_saying_why_and_how_to_accept_it(settings, says):
    with pytest.raises(errors.ConfigurationError) as refused:
        _classify(**settings)
    line = refused.value.one_line()
    assert "best effort" in line and says in line and "granted twice" in line
    assert "appendfsync always" in line and deployment.ACCEPT_BEST_EFFORT in line
    accepted = _classify(declared=deployment.ACCEPT_BEST_EFFORT, **settings)
    assert accepted.kind == deployment.BEST_EFFORT and not accepted.waits


def test_where_config_is_refused_the_mode_must_be_declared_and_is_said_unchecked():
    blocked = {"appendonly": None, "appendfsync": None, "config_error": "NOPERM config|get"}
    with pytest.raises(errors.ConfigurationError, match="could not check") as refused:
        _classify(**blocked)
    assert deployment.DECLARE_FSYNC in refused.value.hint
    found = _classify(declared=deployment.DECLARE_FSYNC, **blocked)
    assert found.kind == deployment.CRASH_SAFE and not found.checked
    assert any("could not check" in note and "NOPERM" in note for note in found.notes)


def test_a_declaration_the_server_contradicts_is_refused():
    with pytest.raises(errors.ConfigurationError, match="declares durability=fsync-always"):
        _classify(declared=deployment.DECLARE_FSYNC, appendfsync="everysec")


def test_a_replica_and_too_few_replicas_are_refused():
    with pytest.raises(errors.ConfigurationError, match=r"is a replica .*role slave"):
        _classify(role="slave")
    with pytest.raises(errors.ConfigurationError, match="1 connected replica"):
        deployment.classify(_server(replicas=1), declared="", replicas=2, where=WHERE)


# -- URLs -----------------------------------------------------------------------------------------


def test_urls_name_the_kind_its_prefix_and_settings():
    named = kinds.parse("redis://u:p@h:6380/2?prefix=locks&replicas=1&durability=fsync-always")
    assert (named.kind, named.table) == ("redis", "locks")
    assert dict(named.settings) == {
        "prefix": "locks",
        "replicas": "1",
        "durability": "fsync-always",
    }
    assert kinds.parse("rediss://h").kind == "redis" and kinds.parse("rediss://h").table is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://h?colour=red", "unknown parameter 'colour'"),
        ("redis://h/zero", "bad Redis database"),
        ("redis://h?prefix={x}", "cannot be a Redis key prefix"),
        ("redis://h?prefix=a*b", "cannot be a Redis key prefix"),
        ("redis://h?replicas=two", "not a number"),
        ("redis://h?durability=yolo", "unknown durability=yolo"),
        ("redis://h:99999", "bad Redis URL"),
    ],
)
def test_bad_urls_are_usage_errors(url, says):
    with pytest.raises(errors.UsageError, match=says):
        kinds.parse(url)


def test_the_password_comes_from_the_url_or_the_environment_never_both(monkeypatch):
    from awsflock.stores.redis import urls

    monkeypatch.delenv(urls.PASSWORD_ENV, raising=False)
    assert urls.password("redis://:s%40cret@h") == "s@cret"
    assert urls.password("redis://h") is None
    monkeypatch.setenv(urls.PASSWORD_ENV, "env-secret")
    assert urls.password("redis://h") == "env-secret"
    assert urls.password("redis://:env-secret@h") == "env-secret"
    with pytest.raises(errors.UsageError, match="different passwords"):
        urls.password("redis://:other@h")


def test_the_store_is_named_without_its_password_and_without_awsflocks_parameters():
    store = kinds.get("redis").open(
        kinds.parse("redis://app:secret@h:6380/3?prefix=p&replicas=1"), kinds.Settings("t", 5.0)
    )
    assert store.where() == "Redis at app@h:6380/3"
    assert store.table_name == "p" and "secret" not in store.where()
    assert "prefix" not in store.url and "replicas" not in store.url  # type: ignore[attr-defined]


# -- error translation ----------------------------------------------------------------------------


def _translated(exc: BaseException, *, sent: bool = True):
    return translate(exc, operation="acquire", where=WHERE, prefix="awsflock", sent=sent)


def _redis_error(name: str, text: str) -> BaseException:
    import redis.exceptions as rx

    exc: BaseException = getattr(rx, name)(text)
    return exc


@pytest.mark.parametrize(
    ("name", "text", "cls", "fix"),
    [
        ("AuthenticationError", "WRONGPASS invalid username-password pair",
         errors.CredentialsError, "AWSFLOCK_REDIS_PASSWORD"),
        ("NoPermissionError", "NOPERM this user has no permissions to run the 'evalsha' command",
         errors.AccessDenied, "ACL SETUSER"),
        # Redis 7.0's answer to a command a script may not run: a plain ERR, not NOPERM.
        ("ResponseError", "The user executing the script can't run this command or subcommand",
         errors.AccessDenied, "~awsflock:*"),
        ("ReadOnlyError", "READONLY You can't write against a read only replica.",
         errors.StoreError, "primary"),
        ("ResponseError", "WRONGTYPE Operation against a key holding the wrong kind of value",
         errors.TableIncompatible, "?prefix="),
        ("ResponseError", "BUSY Redis is busy running a script.", errors.Throttled, "retry"),
        ("BusyLoadingError", "Redis is loading the dataset in memory", errors.Throttled, "retry"),
        ("ResponseError", "MOVED 3999 127.0.0.1:6381", errors.StoreError, "shard"),
        ("ResponseError", "CROSSSLOT Keys in request don't hash to the same slot",
         errors.StoreError, "one lock at a time"),
        ("OutOfMemoryError", "OOM command not allowed", errors.StoreError, "noeviction"),
    ],
)  # fmt: skip
def test_redis_errors_are_one_line_with_the_fix_and_the_right_class(name, text, cls, fix):
    mapped = _translated(_redis_error(name, text)).error
    assert type(mapped) is cls
    assert fix in mapped.one_line() and "\n" not in mapped.one_line()
    assert not mapped.maybe_applied


def test_a_connection_lost_after_sending_may_have_applied_and_before_may_not():
    import redis.exceptions as rx

    for exc in (rx.ConnectionError("Connection closed by server."), rx.TimeoutError("Timeout")):
        after = _translated(exc, sent=True)
        assert isinstance(after.error, errors.EndpointUnreachable) and after.broken
        assert after.error.maybe_applied
        assert not _translated(exc, sent=False).error.maybe_applied


def test_a_script_that_failed_on_its_way_counts_as_maybe_applied():
    import redis.exceptions as rx

    exc = rx.ResponseError("user_script:40: Script attempted to access nonexistent global")
    assert _translated(exc).error.maybe_applied
    assert not _translated(rx.ResponseError("ERR unknown command")).error.maybe_applied


def test_the_acl_rules_cover_only_the_prefix_and_name_every_command():
    text = kinds.get("redis").command("grants")("locks", "app", read_only=False)
    # Channels too: the script publishes on a lock's channel, waiters subscribe to it.
    assert "ACL SETUSER app on resetkeys ~locks:* resetchannels &locks:* -@all" in text
    for command in ("+evalsha", "+eval", "+hset", "+wait", "+info", "+config|get", "+scan"):
        assert command in text
    for command in ("+publish", "+subscribe", "+unsubscribe"):
        assert command in text
    assert "+waitaof" in text.splitlines()[3]  # apart: Redis 7.0 refuses an unknown command
    read_only = kinds.get("redis").command("grants")("locks", "ro", read_only=True)
    assert "+hset" not in read_only and "+hgetall" in read_only
    assert "&" not in read_only and "+subscribe" not in read_only


def test_a_lock_name_with_braces_and_percent_round_trips_through_its_key():
    for name in ("a{b}c", "%7B", "}", "plain", "ü"):
        key = layout.lock_key("p", name)
        assert key.count("{") == 1 and key.count("}") == 1
        assert layout.lock_of("p", key) == name
    assert layout.lock_of("p", "p:audit:x") is None and layout.lock_of("q", "p:{x}:lock") is None


def test_grants_prints_the_acl_rules_for_a_redis_store_and_refuses_dynamodb():
    from click.testing import CliRunner

    from awsflock.cli import cli

    runner = CliRunner()
    redis = runner.invoke(
        cli, ["grants", "--store", "redis://127.0.0.1:6379/0?prefix=locks", "--role", "app"]
    )
    assert redis.exit_code == 0, redis.output
    assert "ACL SETUSER app on resetkeys ~locks:*" in redis.output
    postgres = runner.invoke(cli, ["grants", "--store", "postgresql://u@h/db", "--role", "app"])
    assert postgres.exit_code == 0 and 'GRANT SELECT, INSERT, UPDATE ON TABLE "awsflock"' in (
        postgres.output
    )
    dynamodb = runner.invoke(cli, ["grants", "--store", "dynamodb://t"])
    assert dynamodb.exit_code == 2
    assert "run `awsflock iam-policy`" in dynamodb.output


def test_the_delayed_restart_rule_holds_best_effort_grants_and_caps_their_leases():
    from awsflock.stores.redis import deployment as dep

    young = dep.Server((7, 0, 15), "master", 0, "no", "everysec", uptime_s=10)
    found = dep.classify(
        young, declared=dep.ACCEPT_BEST_EFFORT, replicas=0, where="Redis at h", max_lease_s=60
    )
    assert found.kind == dep.BEST_EFFORT and found.hold_s == 51  # 60 - 10, and the started second
    held = r"grants nothing until max_lease=60s .*\(51s more\)"
    with pytest.raises(errors.Throttled, match=held):
        found.check_grant(30_000, 51, "Redis at h")
    found.check_grant(30_000, 0, "Redis at h")  # the hold is over
    with pytest.raises(errors.UsageError, match="longer than max_lease=60s"):
        found.check_grant(61_000, 0, "Redis at h")
    old = dataclasses.replace(young, uptime_s=600)
    settled = dep.classify(
        old, declared=dep.ACCEPT_BEST_EFFORT, replicas=0, where="w", max_lease_s=60
    )
    assert settled.hold_s == 0
    # Without max_lease in the URL: acquire's default lease, 2 hours.
    assert dep.classify(old, declared=dep.ACCEPT_BEST_EFFORT, replicas=0, where="w").hold_s == (
        7200 - 600 + 1
    )
    # A server that fsyncs every write forgets nothing: no hold, no cap.
    safe = dep.classify(
        dataclasses.replace(young, appendonly="yes", appendfsync="always"),
        declared="",
        replicas=0,
        where="w",
        max_lease_s=60,
    )
    safe.check_grant(10**9, 10**6, "w")


def test_max_lease_in_the_url_is_a_duration():
    assert kinds.parse("redis://h/0?durability=best-effort-may-double-grant&max_lease=90s")
    with pytest.raises(errors.UsageError, match="max_lease=soon in the Redis URL"):
        kinds.parse("redis://h/0?max_lease=soon")


def test_a_server_that_may_evict_is_refused_and_one_without_a_limit_is_not():
    from awsflock.stores.redis import deployment as dep

    full = dep.Server((7, 0, 15), "master", 0, "yes", "always", maxmemory=10**8)
    for policy in ("allkeys-lru", "volatile-ttl", "allkeys-random"):
        with pytest.raises(errors.ConfigurationError, match="may evict keys when full"):
            dep.classify(
                dataclasses.replace(full, eviction=policy),
                declared=dep.ACCEPT_BEST_EFFORT,
                replicas=0,
                where="w",
            )
    for fine in (
        dataclasses.replace(full, eviction="noeviction"),
        full.__class__(
            (7, 0, 15), "master", 0, "yes", "always", maxmemory=0, eviction="allkeys-lru"
        ),
    ):
        assert dep.classify(fine, declared="", replicas=0, where="w").kind == dep.CRASH_SAFE


# -- the settings read again with every grant -----------------------------------------------------


def _recheck_answers(appendfsync: bytes = b"always", aof_size: int = 100) -> list[object]:
    config = [b"appendonly", b"yes", b"appendfsync", appendfsync, b"maxmemory", b"0",
              b"maxmemory-policy", b"noeviction", b"no-appendfsync-on-rewrite", b"no"]  # fmt: skip
    info = (
        b"# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_repl_offset:%d\r\n\r\n"
        b"# Persistence\r\naof_enabled:1\r\naof_rewrite_in_progress:0\r\n"
        b"aof_rewrite_scheduled:0\r\naof_current_size:%d\r\n" % (aof_size, aof_size)
    )
    return [config, info]


def test_settings_read_again_are_judged_once_until_they_change(monkeypatch):
    # Every grant reads the settings again; judging them costs more than the step's own
    # decoding. The same settings (INFO's sizes and offsets aside) are judged once per
    # connection, and a change is judged, and refused, at once.
    from awsflock.stores.redis.link import RedisConn
    from awsflock.stores.redis.store import RedisStore

    store = RedisStore("redis://h:6379/0")
    link = store.link
    conn = RedisConn(None)
    conn.facts = _server(maxmemory=0, eviction="noeviction", no_fsync_on_rewrite="no")
    conn.deployment = link.classify(conn.facts)
    judged: list[object] = []
    real = link.classify
    monkeypatch.setattr(link, "classify", lambda facts: judged.append(facts) or real(facts))
    for size in (100, 200, 300):  # each write grows the AOF: the same settings
        link._rechecked(conn, _recheck_answers(aof_size=size))
    assert len(judged) == 1
    for _ in range(2):  # weaker now: refused, every time
        with pytest.raises(errors.EndpointUnreachable, match="appendfsync everysec") as failed:
            link._rechecked(conn, _recheck_answers(b"everysec"))
        assert failed.value.maybe_applied
    link._rechecked(conn, _recheck_answers())  # set back: passes again
    assert len(judged) == 3
