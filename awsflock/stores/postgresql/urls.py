"""The PostgreSQL store's URLs: ``postgresql://user@host:5432/db?table=NAME`` (or
``postgres://``), a libpq URL with awsflock's own parameters added. Checked when parsed, so a
typo is a usage error before any connection is tried, named without echoing a password."""

from __future__ import annotations

import re

from awsflock import errors

#: Query parameters of a PostgreSQL store URL that are awsflock's, not libpq's.
OWN_PARAMS = ("table",)
SCHEMES = ("postgresql://", "postgres://")
FORM = "postgresql://USER@HOST:5432/DB?table=NAME"
_START = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/*")


def split_url(url: str) -> tuple[str, str | None]:
    """A ``postgresql://`` URL as (libpq's URL, without awsflock's own parameters; the
    ``table`` parameter or None). A UsageError if it is not a well-formed one."""
    from urllib.parse import parse_qsl, urlencode

    _check_form(url)
    # A scheme is case-insensitive (RFC 3986), libpq's parser is not: POSTGRES:// is ours too.
    scheme, _, rest_of_url = url.partition("://")
    url = f"{scheme.lower()}://{rest_of_url}"
    # Not urlunsplit: it would turn postgresql:///db (a Unix socket) into postgresql:/db.
    base, _, query_text = url.partition("?")
    query = parse_qsl(query_text, keep_blank_values=True)
    table = next((v for k, v in query if k == "table"), None) or None
    rest = [(k, v) for k, v in query if k not in OWN_PARAMS]
    for port in (v for k, v in rest if k == "port"):
        _check_ports(port.split(","))
    libpq = base + (f"?{urlencode(rest)}" if rest else "")
    _check_with_libpq(libpq)
    return libpq, table


def _bad(what: str) -> errors.UsageError:
    return errors.UsageError(f"bad PostgreSQL URL: {what}", hint=f"use {FORM}")


def _check_form(url: str) -> None:
    if not url.lower().startswith(SCHEMES):
        start = _START.match(url)
        shown = f" (it starts with {start.group()!r})" if start else ""
        raise _bad(f"it must start with postgresql:// or postgres://{shown}")
    authority = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0]
    hosts = authority.rpartition("@")[2]
    ports = []
    for host in hosts.split(","):
        if host.startswith("["):
            port = host.partition("]")[2]
            if port and not port.startswith(":"):
                raise _bad(f"unexpected {port!r} after the IPv6 address")
            ports.append(port[1:])
        else:
            ports.append(host.partition(":")[2])
    _check_ports(ports)


def _check_ports(ports: list[str]) -> None:
    for port in ports:
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise _bad(f"port {port!r} is not a number from 1 to 65535")


def _check_with_libpq(url: str) -> None:
    """libpq's own reading of the URL, where psycopg is installed (else the store says that
    it needs it, when it connects)."""
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return
    try:
        conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise _bad(" ".join(str(exc).split())) from None
