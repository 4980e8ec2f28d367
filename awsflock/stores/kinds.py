"""The store kinds: the one front door through which the CLI, ``LockTable``, the keep-alive
renewer and the tests choose and open a store, and the one place each kind's abilities are told.

A store is named by a URL (``--store``, ``AWSFLOCK_STORE``) or, with none, is the default kind
(DynamoDB) named by the command-line options. Each backend is one ``Kind`` in ``KINDS``: its URL
schemes, the ``pip`` extra it needs, which of the shared command-line options apply to it (and
why the others do not), what it can do (``Kind``'s capability fields, read by the lock logic,
the CLI, the metrics and the tests alike), and the module of its sub-package (a ``KindModule``)
that parses its URLs, opens its store and runs its own commands (``iam-policy``,
``dev-server``, ``grants``). That module is imported only when a store of that kind is used,
so the CLI never imports a backend package and no command pays for a backend it does not use.
The in-memory store is a kind too (``MEMORY``, in ``ALL``), that ``memory://`` names for the
library's callers (``awsflock.connect``) and never for the CLI's.

A store says which kind it is (``LockStore.kind``, the kind's name); where a capability
depends on what the store meets at run time (DynamoDB's transactions: dynalite has none), its
kind says so and the store answers for itself (``transactions(store)``).

Adding a backend: its sub-package with a ``kind`` module (``parse``, ``open``, ``COMMANDS``),
one ``Kind`` line below, its extra in ``pyproject.toml``, a conformance subclass and a server
fixture (see docs/contributing/writing-a-store.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit

from awsflock import errors

if TYPE_CHECKING:
    from awsflock.clock import Clock
    from awsflock.protocol import LockStore

LOCATION_OPTIONS = ("region", "profile", "endpoint_url")  # where a store is, beyond its table


@dataclass(frozen=True)
class Named:
    """A store as a URL (or, ``url`` empty, as the options alone) names it: its kind, the
    table it names (None: not named) and the kind's own settings from the URL (for DynamoDB
    ``region``, ``endpoint_url``, ``profile``)."""

    kind: str
    url: str = ""
    table: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    """What the caller says besides the URL: the table name, the request timeout, the kind's
    location options (``LOCATION_OPTIONS``, None where not given), the clock, and objects
    only a library caller passes (``extra``: a DynamoDB ``client``)."""

    table: str
    request_timeout: float
    location: Mapping[str, str | None] = field(default_factory=dict)
    clock: Clock | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class KindModule(Protocol):
    """The module a kind names (each backend's ``kind.py``): how its URLs are read, how its
    store is opened, and its own commands by name (``Kind.commands`` lists their names without
    importing it). mypy holds each to this (tests/conformance/kind_modules.py)."""

    #: Each of its own commands: command name -> the function behind it.
    COMMANDS: Mapping[str, Callable[..., Any]]

    def parse(self, url: str) -> Named:
        """``url`` as a store of this kind; a UsageError naming what is wrong with it."""
        ...

    def open(self, named: Named, settings: Settings) -> LockStore:
        """The store ``named`` and ``settings`` describe; nothing connects yet."""
        ...


@runtime_checkable
class Transacting(Protocol):
    """A store whose kind's ``transactions`` is "varies": it says whether it has them."""

    @property
    def transactions(self) -> bool: ...


@dataclass(frozen=True)
class Kind:
    """One backend: where it is, how it is opened, and what it can do (its capabilities,
    declared here once and read from here by the library, the CLI, the metrics and the tests).
    """

    #: Its name (a ``Named.kind``, its stores' ``LockStore.kind`` and the ``store`` attribute
    #: of their metrics), and what messages call a place of it.
    name: str
    title: str
    #: The URL schemes that name it (none: no URL does); its URL form for help and errors.
    schemes: tuple[str, ...]
    form: str
    #: Its ``KindModule`` (in its sub-package), imported only when the kind is used; the
    #: ``pip`` extra it needs (None: always there).
    module: str
    extra: str | None
    #: What its ``--tablename`` names, in messages ("table", "key prefix").
    place: str = "table"
    #: The driver module it needs (``awsflock --version`` says whether it is installed).
    driver: str = ""
    #: Which ``LOCATION_OPTIONS`` apply to it.
    location: tuple[str, ...] = ()
    #: Why ``--skew`` does not apply ("": it does; the store's leases are timed by its callers'
    #: clocks). Its stores' ``skew_free`` follows from it (``skew_free`` below).
    no_skew: str = ""
    #: Whether its steps keep what they need beyond a lock's own record (fence records, the
    #: leases they ended) in the same atomic step: "always"; or "varies": as its store's
    #: ``transactions`` says at run time (DynamoDB: an endpoint without transactions, such as
    #: dynalite, has none; the in-memory store can be made as one). See ``transactions()``.
    transactions: Literal["always", "varies"] = "always"
    #: Whether its stores hold sets of names in one step (``sets()``); shared holders.
    sets: bool = False
    shares: bool = False
    #: The wire protocol its servers speak ("": none, in-process): tests with a tool of that
    #: protocol (a fault proxy, a raw client) run on every kind that speaks it.
    api: str = ""
    #: ``table-create`` options beyond the table's name that apply to it.
    create_options: tuple[str, ...] = ()
    #: The names of its own commands (``KindModule.COMMANDS`` has the functions).
    commands: tuple[str, ...] = ()

    @property
    def skew_free(self) -> bool:
        """Whether its leases are timed by one clock of the store's own, so no skew window
        applies (see ``LockStore.skew_free``)."""
        return bool(self.no_skew)

    def hooks(self) -> KindModule:
        module = importlib.import_module(self.module)
        if not isinstance(module, KindModule):
            raise TypeError(f"{self.module} is not a KindModule (parse, open, COMMANDS)")
        return module

    def parse(self, url: str) -> Named:
        return self.hooks().parse(url)

    def open(self, named: Named, settings: Settings) -> LockStore:
        """The store ``named`` and ``settings`` describe (the URL's parts win; the caller has
        refused contradictions before)."""
        return self.hooks().open(named, settings)

    def command(self, name: str) -> Callable[..., Any]:
        """The function behind one of the kind's own commands."""
        return self.hooks().COMMANDS[name]


KINDS: tuple[Kind, ...] = (
    Kind(
        name="dynamodb",
        title="DynamoDB table",
        schemes=("dynamodb",),
        form="dynamodb://TABLE?region=REGION",
        module="awsflock.stores.dynamodb.kind",
        extra=None,
        driver="botocore",
        location=LOCATION_OPTIONS,
        create_options=("billing_mode", "capacity"),
        transactions="varies",
        sets=True,
        shares=True,
        api="dynamodb",
        commands=("iam-policy", "dev-server"),
    ),
    Kind(
        name="postgresql",
        title="PostgreSQL database",
        schemes=("postgresql", "postgres"),
        form="postgresql://USER@HOST:5432/DB?table=NAME",
        module="awsflock.stores.postgresql.kind",
        extra="postgres",
        driver="psycopg",
        no_skew="its leases are timed by the database server's clock alone, so no clock-skew "
        "window is needed",
        sets=True,
        shares=True,
        api="postgresql",
        commands=("grants",),
    ),
    Kind(
        name="redis",
        title="Redis server",
        schemes=("redis", "rediss"),
        form="redis://[USER:PASSWORD@]HOST:6379/0?prefix=NAME",
        module="awsflock.stores.redis.kind",
        extra="redis",
        place="key prefix",
        driver="redis",
        no_skew="its leases are timed by the Redis server's clock alone, so no clock-skew "
        "window is needed",
        sets=True,
        shares=True,
        api="redis",
        commands=("grants",),
    ),
)

#: The kind used when no URL names one.
DEFAULT = KINDS[0]

#: The in-memory store (``awsflock.stores.memory``): in one process, for tests and the
#: simulator; ``memory://`` names it for the library's callers only (``parse``), never the
#: CLI's. As the DynamoDB store it is timed by its callers' clocks, and it can be made as one
#: without transactions (``MemoryStore(transactions=False)``).
MEMORY = Kind(
    name="memory",
    title="in-memory store",
    schemes=("memory",),
    form="memory://[NAME][?table=NAME]",
    module="awsflock.stores.memory_kind",
    extra=None,
    transactions="varies",
    sets=True,
    shares=True,
)

#: Every kind: those a URL names, and the in-memory store.
ALL: tuple[Kind, ...] = (*KINDS, MEMORY)


def installed(kind: Kind) -> bool:
    """Whether the kind's driver can be imported (without importing it)."""
    import importlib.util

    return not kind.driver or importlib.util.find_spec(kind.driver) is not None


def get(name: str) -> Kind:
    for kind in ALL:
        if kind.name == name:
            return kind
    raise KeyError(name)


def of(store: LockStore) -> Kind:
    """The kind of ``store`` (its ``LockStore.kind``)."""
    return get(store.kind)


def transactions(store: LockStore) -> bool:
    """Whether ``store``'s steps keep fence records and the leases they ended apart from a
    lock's own record: its kind's ``transactions``, or where that varies, the store's own
    answer (``Transacting``)."""
    if of(store).transactions == "always":
        return True
    if not isinstance(store, Transacting):
        raise TypeError(f"a {store.kind} store must say whether it has transactions")
    return store.transactions


def sets(store: LockStore) -> bool:
    """Whether ``store`` takes sets of names in one step: its kind holds sets, and it runs
    transactions (a set's take is one atomic write of several records)."""
    return of(store).sets and transactions(store)


def with_command(command: str) -> Kind:
    """The kind that has ``command`` among its own."""
    return next(kind for kind in KINDS if command in kind.commands)


def forms() -> str:
    return " or ".join(kind.form for kind in KINDS)


def parse(url: str, *, in_process: bool = False) -> Named:
    """``url`` as the store it names; a UsageError (exit 2) naming the forms if none. The
    in-memory store's ``memory://`` only ``in_process`` (a library caller's, not the CLI's)."""
    text = url.strip()
    try:
        scheme = urlsplit(text).scheme.lower()
    except ValueError as exc:
        raise errors.UsageError(f"bad store URL {url!r} ({exc})", hint=f"use {forms()}") from None
    for kind in KINDS:
        if scheme in kind.schemes:
            return kind.parse(text)
    if scheme in MEMORY.schemes:
        if in_process:
            return MEMORY.parse(text)
        raise errors.UsageError(
            f"{scheme}:// is the in-memory store, for the library's tests only "
            "(awsflock.connect): each awsflock command would get an empty one of its own",
            hint=f"use {forms()}",
        )
    shown = f"{scheme}://" if scheme else repr(url)
    raise errors.UsageError(f"unknown store {shown}", hint=f"use {forms()}")


def check_url(url: object, kind_name: str, who: str) -> str:
    """``url`` as given to the store class ``who`` (its library callers' door): a UsageError
    if it is not a string or names a store of another kind than ``kind_name``."""
    kind = get(kind_name)
    if not isinstance(url, str):
        raise errors.UsageError(
            f"{who} takes a store URL string, not {type(url).__name__}", hint=f"use {kind.form}"
        )
    try:
        scheme = urlsplit(url.strip()).scheme.lower()
    except ValueError:
        return url  # the kind's parser names what is wrong with it
    if scheme not in kind.schemes:
        other = next((k for k in KINDS if scheme in k.schemes), None)
        shown = f"{scheme}://" if scheme else "a URL without a scheme"
        said = f", which names a {other.title}" if other else ""
        raise errors.UsageError(
            f"{who} takes a {kind.title}'s URL, not {shown}{said}", hint=f"use {kind.form}"
        )
    return url


def check_type(who: str, name: str, value: Any, types: tuple[type, ...], what: str) -> None:
    """A UsageError if the argument ``name`` of ``who`` is not of ``types`` (``what``: them
    in words); a bool is no number."""
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise errors.UsageError(
            f"{who}: {name} must be {what}, not {type(value).__name__}",
            hint=f"pass {name} as {what}",
        )


def check_timeout(who: str, seconds: Any) -> float:
    """A request timeout given to a store class: a positive number of seconds."""
    check_type(who, "request_timeout", seconds, (int, float), "a number of seconds")
    if not seconds > 0:
        raise errors.UsageError(
            f"{who}: request_timeout must be more than 0 seconds, not {seconds}",
            hint="pass a number of seconds, e.g. request_timeout=5",
        )
    return float(seconds)


def default() -> Named:
    """The default kind, named by the options alone."""
    return Named(DEFAULT.name)


def applies_to(option: str) -> str:
    """The titles of the kinds a location option applies to, for messages ("DynamoDB")."""
    return ", ".join(k.title.split()[0] for k in KINDS if option in k.location)


def for_table(
    store: LockStore | None,
    table_name: str,
    request_timeout: float | None,
    location: Mapping[str, str | None],
    *,
    clock: Clock,
    client: Any = None,
) -> LockStore:
    """The store of a ``LockTable``: the one given, or the default kind's that the other
    arguments name (a UsageError if both are given)."""
    if store is not None:
        given = {
            "table_name": table_name != "awsflock",
            "client": client is not None,
            **{name: value is not None for name, value in location.items()},
            "request_timeout": request_timeout is not None,
        }
        wrong = [name for name, is_given in given.items() if is_given]
        if wrong:
            raise errors.UsageError(
                f"{', '.join(wrong)} describe a {DEFAULT.title.split()[0]} store, and a store "
                "was given",
                hint="set them on the store itself, or pass them without store=",
            )
        return store
    from awsflock.protocol import DEFAULT_REQUEST_TIMEOUT

    settings = Settings(
        table_name,
        DEFAULT_REQUEST_TIMEOUT if request_timeout is None else request_timeout,
        location,
        clock=clock,
        extra={} if client is None else {"client": client},
    )
    return DEFAULT.open(default(), settings)


def awaited(store: LockStore) -> Any:
    """``store`` with its steps awaited, for ``awsflock.aio``: as its kind's module makes it
    (``awaited(store)``: the in-memory store's answers at once), else in worker threads
    (``threaded_async``), never blocking the event loop."""
    own = getattr(of(store).hooks(), "awaited", None)
    if own is not None:
        return own(store)
    from awsflock.stores.threaded_async import AsyncThreadedStore

    return AsyncThreadedStore(store)
