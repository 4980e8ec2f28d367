"""``awsflock.connect()``: a ``LockTable`` on the store a URL names, found as the CLI finds it
(the rules are ``awsflock.stores.resolve``'s, the CLI's own); ``open_store``, what it and
``awsflock.aio.connect`` open; and ``open_table``, the CLI's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from awsflock.stores import kinds, resolve

if TYPE_CHECKING:
    from awsflock.clock import Clock
    from awsflock.lock.lease import LockTable
    from awsflock.protocol import LockStore


def connect(
    url: str | None = None,
    *,
    table: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    endpoint_url: str | None = None,
    request_timeout: float | str | None = None,
    skew: float | str | None = None,
    owner: str | None = None,
    clock: Clock | None = None,
) -> LockTable:
    """A lock table on the store ``url`` names, as ``awsflock --store URL`` finds it.

    ``url`` is any ``--store`` form (``dynamodb://TABLE?region=R``,
    ``postgresql://USER@HOST/DB?table=NAME``, ``redis://HOST:6379/0?prefix=NAME``), or
    ``memory://`` for the in-memory store in tests (``memory://NAME``: one store shared within
    the process by every ``connect`` of that name). Without it, ``AWSFLOCK_STORE``; without
    that, DynamoDB, named by the other arguments and the usual AWS settings.

    Each argument left out is found as the CLI finds its option: ``table`` in the URL
    (``?table=``, ``?prefix=``), else ``AWSFLOCK_TABLE``, else "awsflock"; ``region`` and
    ``endpoint_url`` in the URL, else ``AWS_REGION`` and ``AWSFLOCK_ENDPOINT_URL`` (or
    ``AWS_ENDPOINT_URL_DYNAMODB``, ``AWS_ENDPOINT_URL``); ``request_timeout`` (seconds, or a
    duration as text: "5s") in ``AWSFLOCK_REQUEST_TIMEOUT``, else 5 s. ``skew`` is the
    clock-skew window (default 5 s) of the stores timed by their callers' clocks; ``owner``
    names this process in the lock records; ``clock`` times the in-memory store (a
    ``FakeClock`` in tests).

    An argument that contradicts the URL, or does not apply to its kind (``region=`` with a
    Redis URL, ``skew=`` with a server-timed store), is refused with a ``UsageError`` saying
    which, as the CLI refuses the option. Nothing connects until the table's first request.
    """
    if owner is not None:
        kinds.check_type("connect", "owner", owner, (str,), "a string")
    store, skew_s = open_store(
        url,
        table=table,
        region=region,
        profile=profile,
        endpoint_url=endpoint_url,
        request_timeout=request_timeout,
        skew=skew,
        clock=clock,
    )
    from awsflock.lock.lease import LockTable

    return LockTable(store=store, skew=skew_s, owner=owner)


def open_store(
    url: str | None,
    *,
    table: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    endpoint_url: str | None = None,
    request_timeout: float | str | None = None,
    skew: float | str | None = None,
    clock: Clock | None = None,
) -> tuple[LockStore, float | str]:
    """The store ``connect`` (and ``awsflock.aio.connect``) opens for these arguments, and
    the skew window its table takes."""
    location = {"region": region, "profile": profile, "endpoint_url": endpoint_url}
    for name, value in (("url", url), ("table", table), *location.items()):
        if value is not None:
            kinds.check_type("connect", name, value, (str,), "a string")
    said = resolve.from_arguments(url, table, location, skew=skew)
    found = resolve.where(said)
    store = _open(found, resolve.request_timeout(request_timeout), clock)
    return store, _skew(skew)


def _open(found: resolve.Where, request_timeout: float, clock: Clock | None) -> LockStore:
    """The store ``found`` names (the import of the store's driver is here)."""
    settings = kinds.Settings(found.table, request_timeout, found.location, clock=clock)
    return found.kind.open(found.named, settings)


def _skew(skew: float | str | None) -> float | str:
    from awsflock.lock.table import DEFAULT_SKEW

    return DEFAULT_SKEW if skew is None else skew


def open_table(
    found: resolve.Where,
    *,
    request_timeout: float,
    skew: float | str | None,
    owner: str | None = None,
    clock: Clock | None = None,
) -> LockTable:
    """The lock table on the store ``found`` names (the CLI's); its clock is the store's, its
    ``skew`` the default if None."""
    from awsflock.lock.lease import LockTable

    return LockTable(store=_open(found, request_timeout, clock), skew=_skew(skew), owner=owner)
