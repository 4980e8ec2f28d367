"""The Redis store's URLs: ``redis://[user[:password]@]host:6379/0?prefix=NAME`` (``rediss://``
for TLS), as ``--store`` and ``RedisStore`` take them, checked when parsed so that a typo is a
usage error before any connection is tried.

awsflock's own URL parameters: ``prefix`` (the keys' prefix; else the table name),
``replicas`` (how many replicas each step waits for, ``WAIT``/``WAITAOF``) and ``durability``
(``fsync-always``: declare the server's persistence where ``CONFIG GET`` is not allowed;
``best-effort-may-double-grant``: accept a server that does not fsync every write, under the
delayed-restart rule: no lease longer than ``max_lease`` (default 2h), and no grant or renewal
until ``max_lease`` after the server started); redis-py's ``ssl_*`` pass through. The
password comes from the URL or, where it has none, from ``AWSFLOCK_REDIS_PASSWORD``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from awsflock import errors
from awsflock.stores import kinds
from awsflock.stores.kinds import Named
from awsflock.stores.redis import deployment, layout

#: Where the password comes from when the URL has none.
PASSWORD_ENV = "AWSFLOCK_REDIS_PASSWORD"
#: awsflock's own parameters, and redis-py's that may pass through (TLS set-up).
OWN = ("prefix", "replicas", "durability", "max_lease")
PASSED = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
FORM = "redis://[USER:PASSWORD@]HOST:6379/0?prefix=NAME"
#: The store class, as errors of its arguments name it.
WHO = "RedisStore"


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


@dataclass(frozen=True)
class Config:
    """A ``RedisStore``'s settings: what redis-py is given (``url``, ``password``) and
    awsflock's own."""

    url: str
    prefix: str
    password: str | None
    replicas: int
    declared: str
    max_lease_s: float


def configure(
    url: str,
    prefix: str | None = None,
    *,
    password: str | None = None,
    replicas: int | None = None,
    declared: str | None = None,
    max_lease_s: float | None = None,
) -> Config:
    """A ``RedisStore``'s settings from its URL (the CLI's form, with every parameter the CLI
    takes) and the keywords given beside it (None: not given). A URL parameter and a keyword
    that disagree are a UsageError, as is an argument of the wrong type."""
    named = parse(kinds.check_url(url, "redis", WHO))
    _check(prefix, password, replicas, declared, max_lease_s)
    own = named.settings
    in_url_replicas = int(own["replicas"]) if own.get("replicas") else None
    in_url_lease = max_lease_seconds(own["max_lease"]) if own.get("max_lease") else None
    max_lease = _one("max_lease", in_url_lease, None if max_lease_s is None else float(max_lease_s))
    return Config(
        url=client_url(named.url),
        prefix=check_prefix(_one("prefix", named.table, prefix) or "awsflock"),
        password=_password(named.url, password),
        replicas=_one("replicas", in_url_replicas, replicas) or 0,
        declared=_one("durability", own.get("durability") or None, declared or None) or "",
        max_lease_s=deployment.DEFAULT_MAX_LEASE_S if max_lease is None else max_lease,
    )


def _check(
    prefix: object, password: object, replicas: object, declared: object, max_lease_s: object
) -> None:
    """A UsageError for a keyword given beside the URL that is of the wrong type or value."""
    for name, value, types, what in (
        ("prefix", prefix, (str,), "a string"),
        ("password", password, (str,), "a string"),
        ("replicas", replicas, (int,), "a whole number"),
        ("declared", declared, (str,), "a string"),
        ("max_lease_s", max_lease_s, (int, float), "a number of seconds"),
    ):
        if value is not None:
            kinds.check_type(WHO, name, value, types, what)
    if declared is not None and declared not in deployment.DECLARATIONS:
        raise errors.UsageError(
            f"{WHO}: unknown declared={declared!r}",
            hint=f"use {deployment.DECLARE_FSYNC!r} or {deployment.ACCEPT_BEST_EFFORT!r}, or "
            "leave it out (checked)",
        )
    if isinstance(replicas, int) and replicas < 0:
        raise errors.UsageError(f"{WHO}: replicas={replicas} is below 0", hint="pass 0 or more")
    if isinstance(max_lease_s, (int, float)) and not max_lease_s >= 1:
        raise errors.UsageError(
            f"{WHO}: max_lease_s={max_lease_s} is less than a second", hint="pass 1 or more"
        )


_T = TypeVar("_T")


def _one(name: str, in_url: _T | None, given: _T | None) -> _T | None:
    """A setting given in the URL or beside it (None: not given); both: they must agree."""
    if in_url is not None and given is not None and given != in_url:
        raise errors.UsageError(
            f"{WHO}: {name}={in_url} in the URL and {given!r} beside it disagree",
            hint="give it in one place",
        )
    return given if in_url is None else in_url


def _password(url: str, given: str | None) -> str | None:
    """The password: given beside the URL, else the URL's or ``AWSFLOCK_REDIS_PASSWORD``'s."""
    in_url = urlsplit(url).password
    if given is None:
        return password(url)
    if in_url is not None and unquote(in_url) != given:
        raise errors.UsageError(
            f"{WHO}: the URL and password= give different passwords",
            hint="give the password in one place",
        )
    return given
