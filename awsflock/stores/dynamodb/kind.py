"""The DynamoDB store's entry in the store registry (``awsflock.stores.kinds``): its URLs
(``dynamodb://TABLE?region=R&endpoint_url=URL&profile=P``, every part optional), how it is
opened, and its own commands (``iam-policy``, ``dev-server``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import parse_qsl, urlsplit

from awsflock import errors
from awsflock.stores.kinds import LOCATION_OPTIONS, Named, Settings

if TYPE_CHECKING:
    from awsflock.stores.dynamodb.store import DynamoDBStore


def parse(url: str) -> Named:
    parts = urlsplit(url)
    try:
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
    except ValueError as exc:
        raise errors.UsageError(f"bad store URL {url!r} ({exc})") from None
    unknown = sorted(set(query) - set(LOCATION_OPTIONS))
    if unknown or parts.path not in ("", "/"):
        what = f"parameter {unknown[0]!r}" if unknown else f"path {parts.path!r}"
        raise errors.UsageError(
            f"bad store URL {url!r}: unknown {what}",
            hint="use dynamodb://TABLE?region=REGION&endpoint_url=URL&profile=PROFILE",
        )
    settings = {name: query[name] for name in LOCATION_OPTIONS if query.get(name)}
    return Named("dynamodb", url, table=parts.netloc or None, settings=settings)


def open(named: Named, settings: Settings) -> DynamoDBStore:
    from awsflock.stores.dynamodb.store import DynamoDBStore

    where = {
        name: named.settings.get(name) or settings.location.get(name) or None
        for name in LOCATION_OPTIONS
    }
    return DynamoDBStore(
        named.table or settings.table,
        settings.extra.get("client"),
        request_timeout=settings.request_timeout,
        clock=settings.clock,
        **where,
    )


def iam_policy(table: str, *, read_only: bool, region: str, account: str) -> str:
    from awsflock.stores.dynamodb.iam import iam_policy as policy

    return policy(table, read_only=read_only, region=region, account=account)


def dev_server(port: int, ready: Callable[[str], None]) -> None:
    from awsflock.stores.dynamodb.devserver import serve

    serve(port, ready)


COMMANDS: Mapping[str, Callable[..., Any]] = {"iam-policy": iam_policy, "dev-server": dev_server}
