"""Store URLs (``--store``, ``AWSFLOCK_STORE``): which store a command or a ``LockTable`` uses.

- ``postgresql://user@host:5432/db?table=awsflock_locks`` (or ``postgres://``): the PostgreSQL
  store; a libpq URL, so ``PGHOST``, ``PGPASSWORD``, ``PGSSLMODE``, ``~/.pgpass`` and the rest
  of libpq's environment fill in what it leaves out. ``table`` is awsflock's own parameter.
- ``dynamodb://TABLE?region=R&endpoint_url=URL&profile=P``: the DynamoDB store, as without
  ``--store``; every part is optional.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from awsflock import errors

POSTGRESQL = ("postgresql", "postgres")
DYNAMODB = "dynamodb"
SCHEMES = "postgresql://USER@HOST:5432/DB?table=NAME or dynamodb://TABLE?region=REGION"
#: Query parameters of a PostgreSQL store URL that are awsflock's, not libpq's.
OWN_PARAMS = ("table",)


def split_postgresql(url: str) -> tuple[str, str | None]:
    """A ``postgresql://`` URL as (libpq's URL, without awsflock's own parameters; the
    ``table`` parameter or None)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    table = next((v for k, v in query if k == "table"), None) or None
    rest = [(k, v) for k, v in query if k not in OWN_PARAMS]
    return urlunsplit(parts._replace(query=urlencode(rest))), table


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL: its kind ("postgresql" or "dynamodb"), the table it names (None:
    not named) and, for DynamoDB, region, endpoint and profile."""

    kind: str
    url: str
    table: str | None = None
    region: str | None = None
    endpoint_url: str | None = None
    profile: str | None = None


def parse(url: str) -> StoreURL:
    """``url`` as a StoreURL; a UsageError (exit 2) naming the forms if it is none of them."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
    except ValueError as exc:
        raise errors.UsageError(f"bad store URL {url!r} ({exc})", hint=f"use {SCHEMES}") from None
    scheme = parts.scheme.lower()
    if scheme in POSTGRESQL:
        return StoreURL("postgresql", text, table=split_postgresql(text)[1])
    if scheme == DYNAMODB:
        unknown = sorted(set(query) - {"region", "endpoint_url", "profile"})
        if unknown or parts.path not in ("", "/"):
            what = f"parameter {unknown[0]!r}" if unknown else f"path {parts.path!r}"
            raise errors.UsageError(
                f"bad store URL {url!r}: unknown {what}",
                hint="use dynamodb://TABLE?region=REGION&endpoint_url=URL&profile=PROFILE",
            )
        return StoreURL(
            "dynamodb",
            text,
            table=parts.netloc or None,
            region=query.get("region") or None,
            endpoint_url=query.get("endpoint_url") or None,
            profile=query.get("profile") or None,
        )
    shown = f"{scheme}://" if scheme else repr(url)
    raise errors.UsageError(f"unknown store {shown}", hint=f"use {SCHEMES}")
