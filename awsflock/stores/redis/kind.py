"""The Redis store's entry in the store registry (``awsflock.stores.kinds``): its URLs
(``redis://[user[:password]@]host:6379/0?prefix=NAME``, ``rediss://`` for TLS), how it is
opened, and its own command (``acl``, the rules a Redis user needs).

awsflock's own URL parameters: ``prefix`` (the keys' prefix; else the table name),
``replicas`` (how many replicas each step waits for, ``WAIT``/``WAITAOF``) and ``durability``
(``fsync-always``: declare the server's persistence where ``CONFIG GET`` is not allowed;
``best-effort-may-double-grant``: accept a server that does not fsync every write, under the
delayed-restart rule: no lease longer than ``max_lease`` (default 2h), and no grant or renewal
until ``max_lease`` after the server started). The
password comes from the URL or, where it has none, from ``AWSFLOCK_REDIS_PASSWORD``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from awsflock import errors
from awsflock.stores.kinds import Named, Settings
from awsflock.stores.redis import acl as acl_rules
from awsflock.stores.redis import deployment, layout

if TYPE_CHECKING:
    from awsflock.stores.redis.store import RedisStore

#: Where the password comes from when the URL has none.
PASSWORD_ENV = "AWSFLOCK_REDIS_PASSWORD"
#: awsflock's own parameters, and redis-py's that may pass through (TLS set-up).
OWN = ("prefix", "replicas", "durability", "max_lease")
PASSED = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
FORM = "redis://[USER:PASSWORD@]HOST:6379/0?prefix=NAME"


def parse(url: str) -> Named:
    """``url`` as a Redis store: a UsageError naming what is wrong with it."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError as exc:
        raise errors.UsageError(f"bad Redis URL: {exc}", hint=f"use {FORM}") from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    unknown = [k for k, _ in query if k not in OWN + PASSED]
    if unknown:
        raise errors.UsageError(
            f"unknown parameter {unknown[0]!r} in the Redis URL",
            hint=f"awsflock's are {', '.join(OWN)}",
        )
    own = {k: v for k, v in query if k in OWN}
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise errors.UsageError(
            f"bad Redis database {parts.path!r} in the URL", hint="use a number, e.g. /0"
        )
    prefix = own.get("prefix") or None
    if prefix is not None:
        check_prefix(prefix)
    if not own.get("replicas", "0").isdigit():
        raise errors.UsageError(
            f"replicas={own['replicas']} in the Redis URL is not a number",
            hint="give how many replicas each step waits for, e.g. replicas=1",
        )
    if own.get("durability", "") not in deployment.DECLARATIONS:
        raise errors.UsageError(
            f"unknown durability={own['durability']} in the Redis URL",
            hint=f"use durability={deployment.DECLARE_FSYNC} or "
            f"durability={deployment.ACCEPT_BEST_EFFORT}, or leave it out (checked)",
        )
    if "max_lease" in own:
        max_lease_seconds(own["max_lease"])
    return Named("redis", url, table=prefix, settings=own)


def max_lease_seconds(text: str) -> float:
    """``max_lease=DURATION`` of a URL, in seconds (a UsageError if it is not one)."""
    from awsflock import durations

    try:
        return float(durations.lease_seconds(text))
    except errors.UsageError as exc:
        raise errors.UsageError(
            f"max_lease={text} in the Redis URL: {exc.message}", hint=exc.hint
        ) from None


def check_prefix(prefix: str) -> str:
    if not layout.PREFIX.match(prefix):
        raise errors.UsageError(
            f"{prefix!r} cannot be a Redis key prefix for awsflock",
            hint="use 1 to 64 letters, digits, '_', '-', '.' or ':'",
        )
    return prefix


def password(url: str) -> str | None:
    """The password: the URL's, else ``AWSFLOCK_REDIS_PASSWORD``'s; both and different: a
    UsageError."""
    given = urlsplit(url).password
    env = os.environ.get(PASSWORD_ENV) or None
    if given is not None and env is not None and unquote(given) != env:
        raise errors.UsageError(
            f"the Redis URL and {PASSWORD_ENV} give different passwords",
            hint="give the password in one place",
        )
    return unquote(given) if given is not None else env


def client_url(url: str) -> str:
    """``url`` without awsflock's own parameters: what redis-py is given."""
    parts = urlsplit(url)
    rest = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in OWN]
    return urlunsplit(parts._replace(query=urlencode(rest)))


def open(named: Named, settings: Settings) -> RedisStore:
    from awsflock.stores.redis.store import RedisStore

    return RedisStore(
        client_url(named.url),
        check_prefix(named.table or settings.table),
        password=password(named.url),
        replicas=int(named.settings.get("replicas") or 0),
        declared=named.settings.get("durability", ""),
        max_lease_s=max_lease_seconds(named.settings["max_lease"])
        if named.settings.get("max_lease")
        else deployment.DEFAULT_MAX_LEASE_S,
        request_timeout=settings.request_timeout,
        clock=settings.clock,
        # Steps timed by the callers' clocks instead of the server's: simulations in virtual time.
        server_time=bool(settings.extra.get("server_time", True)),
    )


def acl(prefix: str, user: str, *, read_only: bool) -> str:
    return acl_rules.acl(check_prefix(prefix), user, read_only=read_only)
