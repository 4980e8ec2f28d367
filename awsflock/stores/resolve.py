"""Where the locks live, from what a caller says: the one copy of the rules that the CLI's
shared options (``awsflock.cli.options``) and ``awsflock.connect()`` both follow.

The store is the URL the caller gives, else ``AWSFLOCK_STORE``, else the default kind
(DynamoDB); its table is the URL's (``?table=``, ``?prefix=``, DynamoDB's host part), else the
caller's, else ``AWSFLOCK_TABLE``, else "awsflock"; region, profile and endpoint are the URL's,
else the caller's, else the environment's (``AWS_REGION``, ``ENDPOINT_ENV``); the request
timeout is the caller's, else ``AWSFLOCK_REQUEST_TIMEOUT``, else 5 s. What the environment or a
default says yields to the URL silently; what the caller says itself (``Said.given``) must not
contradict the URL, and must apply to the URL's kind: a UsageError says which and the fix.
The CLI reads its environment through click; ``from_arguments`` reads it for the library.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from awsflock import durations, errors
from awsflock.stores import kinds

#: The variables, and the defaults, of what names a store (the CLI's options say the same).
STORE_ENV = "AWSFLOCK_STORE"
TABLE_ENV = "AWSFLOCK_TABLE"
REGION_ENV = "AWS_REGION"
TIMEOUT_ENV = "AWSFLOCK_REQUEST_TIMEOUT"
DEFAULT_TABLE = "awsflock"
DEFAULT_REQUEST_TIMEOUT = "5s"
#: The variables that name the DynamoDB endpoint, the first one set winning.
ENDPOINT_ENV = (
    "AWSFLOCK_ENDPOINT_URL",
    "DYNAMO_ENDPOINT_URL",  # awsflock 0.2.0's variable
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL",
)
#: ``connect()``'s names for what the CLI calls otherwise (its parameters' names are the keys).
_ARGUMENTS = {"tablename": "table", "store": "url"}


@dataclass(frozen=True)
class Words:
    """How messages name what the caller said: the CLI's options (``--tablename``, ``--store``)
    or ``connect()``'s arguments (``table=``, the URL)."""

    cli: bool

    def option(self, name: str) -> str:
        """The option or argument of parameter ``name`` (the CLI's: ``tablename``, ...)."""
        if self.cli:
            return "--" + name.replace("_", "-")
        return f"{_ARGUMENTS.get(name, name)}="

    def valued(self, name: str, value: object) -> str:
        return f"{self.option(name)} {value}" if self.cli else f"{self.option(name)}{value!r}"

    @property
    def url(self) -> str:
        """A store URL the caller gave itself."""
        return "--store" if self.cli else "the URL"


CLI = Words(cli=True)
LIBRARY = Words(cli=False)


@dataclass(frozen=True)
class Said:
    """What a caller said about where the locks live, its environment and defaults filled in:
    the store URL (None or "": the default kind), the table, the location options (None where
    unsaid); ``given``: which of them (by the CLI's parameter names: ``store``, ``tablename``,
    ``region``, ``profile``, ``endpoint_url``, ``skew``) the caller gave itself rather than
    its environment or a default; ``endpoint_env``: the variable that named the endpoint, if
    one did; ``in_process``: whether it may name the in-memory store (the library's callers,
    not the CLI's: each command would have a store of its own)."""

    store: str | None
    table: str
    location: Mapping[str, str | None]
    given: frozenset[str]
    words: Words
    endpoint_env: str | None = None
    in_process: bool = False


@dataclass(frozen=True)
class Where:
    """The store a caller named: its ``Named``, table and location (the URL's parts won)."""

    named: kinds.Named
    table: str
    location: Mapping[str, str | None]

    @property
    def kind(self) -> kinds.Kind:
        return kinds.get(self.named.kind)


def where(said: Said) -> Where:
    """The store ``said`` names, every rule checked (``named_store``, then ``check_endpoint``)."""
    found = located(said, named_store(said))
    check_endpoint(found, said)
    return found


def located(said: Said, named: kinds.Named) -> Where:
    """``named`` with the table and location: the URL's parts, else what ``said`` says."""
    own = named.settings
    location = {n: own.get(n) or said.location.get(n) or None for n in kinds.LOCATION_OPTIONS}
    return Where(named, named.table or said.table, location)


def named_store(said: Said) -> kinds.Named:
    """The store ``said.store`` names (the default kind, named by the other options, if none),
    with options that do not apply to its kind, or contradict its URL, refused."""
    if not said.store:
        return kinds.default()
    named = kinds.parse(said.store, in_process=said.in_process)
    kind = kinds.get(named.kind)
    words = said.words

    def given(name: str) -> bool:
        return name in said.given

    # Where the URL came from, for the refusals: a URL in the environment never silently
    # overrides what the caller says itself.
    source = words.url if given("store") else STORE_ENV
    if named.table and given("tablename") and said.table != named.table:
        raise errors.UsageError(
            f"{words.valued('tablename', said.table)} and the table of {source} "
            f"({named.table}) disagree",
            hint="name the table in one place",
        )
    for name in kinds.LOCATION_OPTIONS:
        value, own = said.location.get(name), named.settings.get(name)
        if own and given(name) and value != own:
            option = words.option(name)
            raise errors.UsageError(
                f"{words.valued(name, value)} and the {name} of {source} ({own}) disagree",
                hint=f"drop {option}, or the {name} from {source}",
            )
    _refuse_foreign(said, kind, source)
    return named


def _refuse_foreign(said: Said, kind: kinds.Kind, source: str) -> None:
    """Options the caller gave that do not apply to ``kind``, refused by name."""
    words = said.words
    foreign = [n for n in kinds.LOCATION_OPTIONS if n in said.given and n not in kind.location]
    if foreign:
        options = [words.option(n) for n in foreign]
        owners = sorted({kinds.applies_to(n) for n in foreign})
        article = "an" if kind.title[0] in "aeiou" else "a"
        raise errors.UsageError(
            f"{', '.join(options)} {'apply' if len(options) > 1 else 'applies'} to "
            f"{' and '.join(owners)}, and {source} names {article} {kind.title}",
            hint=f"drop {', '.join(options)}" + ("" if source == words.url else f" or {source}"),
        )
    if kind.no_skew and "skew" in said.given:
        skew = words.option("skew")
        raise errors.UsageError(
            f"{skew} does not apply to the {kind.title.split()[0]} store: {kind.no_skew}",
            hint=f"drop {skew}",
        )


def check_endpoint(found: Where, said: Said) -> None:
    """An endpoint URL without a scheme (``127.0.0.1:8000``) would be read as no endpoint at
    all, and the failure would name the region: refused here, naming the fix."""
    url = found.location.get("endpoint_url")
    if "endpoint_url" not in found.kind.location or not url or "://" in url:
        return
    if found.named.settings.get("endpoint_url"):
        source = "the endpoint_url of the store URL"
    else:
        source = said.endpoint_env or said.words.option("endpoint_url")
    host = url.split("/")[0].rpartition(":")[0] or url.split("/")[0]
    local = host.strip("[]") in ("localhost", "::1") or host.startswith("127.")
    raise errors.UsageError(f"{source} needs a scheme: {'http' if local else 'https'}://{url}")


def from_arguments(
    url: str | None,
    table: str | None,
    location: Mapping[str, str | None],
    *,
    skew: Any = None,
) -> Said:
    """What a library caller said (None: not said), its environment filled in as the CLI's
    options fill in theirs. May name the in-memory store (``memory://``)."""
    env = os.environ
    given = {name for name, value in location.items() if value is not None}
    given |= {n for n, v in (("store", url), ("tablename", table), ("skew", skew)) if v is not None}
    endpoint_env = None
    where = dict(location)
    if where.get("region") is None:
        where["region"] = env.get(REGION_ENV) or None
    if where.get("endpoint_url") is None:
        endpoint_env = next((name for name in ENDPOINT_ENV if env.get(name)), None)
        where["endpoint_url"] = env[endpoint_env] if endpoint_env else None
    return Said(
        store=url if url is not None else env.get(STORE_ENV) or None,
        table=table or env.get(TABLE_ENV) or DEFAULT_TABLE,
        location=where,
        given=frozenset(given),
        words=LIBRARY,
        endpoint_env=endpoint_env,
        in_process=True,
    )


def request_timeout(value: float | str | None) -> float:
    """A library caller's request timeout in seconds: ``value`` (a number or a duration as
    text, "5s"), else ``AWSFLOCK_REQUEST_TIMEOUT``, else 5 s."""
    if value is not None:
        if not isinstance(value, str):
            kinds.check_type("connect", "request_timeout", value, (int, float), "seconds")
        return durations.request_timeout_seconds(value)
    text = os.environ.get(TIMEOUT_ENV) or DEFAULT_REQUEST_TIMEOUT
    try:
        return durations.request_timeout_seconds(text)
    except errors.UsageError as exc:
        raise errors.UsageError(f"{TIMEOUT_ENV}: {exc.message}", hint=exc.hint) from None
