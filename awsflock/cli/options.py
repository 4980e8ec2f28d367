"""Options every command shares, and the click types for durations."""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import click

from awsflock import durations, errors
from awsflock.stores import kinds, resolve

if TYPE_CHECKING:
    from awsflock.lock.lease import LockTable

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_TABLE = resolve.DEFAULT_TABLE
ENDPOINT_ENV = resolve.ENDPOINT_ENV


class DurationType(click.ParamType):  # type: ignore[type-arg]  # generic only in new click
    """A duration as text ('15m', '300', '2 hours'); checked by the given function."""

    name = "duration"

    def __init__(self, check: Callable[[str], Any]) -> None:
        self.check = check

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self.check(value)
        except errors.UsageError as exc:
            self.fail(exc.one_line(), param, ctx)


@dataclass
class Common:
    """What the shared options said."""

    tablename: str
    region: str | None
    profile: str | None
    endpoint_url: str | None
    verbose: int
    quiet: bool
    log_format: str
    debug: bool
    skew: float
    request_timeout: float = 5.0
    #: The store ``--store`` (or ``AWSFLOCK_STORE``) names; without one, the default kind.
    named: kinds.Named = field(default_factory=kinds.default)

    @property
    def kind(self) -> kinds.Kind:
        return kinds.get(self.named.kind)

    def location(self) -> dict[str, str | None]:
        return {"region": self.region, "profile": self.profile, "endpoint_url": self.endpoint_url}

    def store_env(self) -> dict[str, str]:
        """What the keep-alive renewer needs in its environment: the store URL, which may hold
        a password, is passed there rather than on a command line anyone can read (empty
        without one, so that an AWSFLOCK_STORE the caller's command line overrode does not
        name another store for the renewer)."""
        return {"AWSFLOCK_STORE": self.named.url}

    def store_options(self) -> list[str]:
        """These options as command-line arguments (for ``acquire --keep-alive``'s renewer):
        those that apply to the store's kind."""
        argv = ["--tablename", self.tablename, "--request-timeout", f"{self.request_timeout}s"]
        if not self.kind.skew_free:
            argv += ["--skew", f"{self.skew}s"]
        for name, value in self.location().items():
            if value and name in self.kind.location:
                argv += ["--" + name.replace("_", "-"), value]
        return argv

    def table(self, owner: str | None = None) -> LockTable:
        """The LockTable these options name (the import of the library happens here)."""
        from awsflock.lock.connect import open_table

        found = resolve.Where(self.named, self.tablename, self.location())
        table = open_table(found, request_timeout=self.request_timeout, skew=self.skew, owner=owner)
        table.started = process_started()  # a wait's bound counts from the command's start
        return table


def process_started() -> float | None:
    """This process's start on the monotonic clock (Linux: from ``/proc``), so that a bound
    such as ``--no-wait``'s counts its start-up too; None where it cannot be told."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.monotonic() - age if 0 <= age < 60 else None


#: Set by the --debug option so the top-level error handler knows whether to show tracebacks.
STATE: dict[str, bool] = {"debug": False, "ran": False}


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        STATE["debug"] = True
    return value


#: Set on a command's callback that takes the shared options: those given before the command
#: are refused for any other.
SHARED = "_awsflock_shared_options"
#: The shared options that take a value, by parameter name (-v, -q and --debug are the others).
VALUED: tuple[str, ...] = ("store", "tablename", "region", "profile", "endpoint_url")
VALUED += ("skew", "request_timeout", "log_format")


def _shared(before: bool) -> list[Callable[[F], F]]:
    """The options every command shares, in --help's order. After the command they are its own,
    with their variables and defaults; before it (``before``) the same names are the group's,
    hidden, with neither: the command's own fill in what neither place says."""
    return [*_where_options(before), *_how_options(before)]


def _option(before: bool, *names: str, **kw: Any) -> Any:
    """One shared option, after the command or (``before``) before it: see ``_shared``."""
    if before:
        drop = ("envvar", "default", "help", "show_default")
        return click.option(*names, hidden=True, **{k: kw[k] for k in kw if k not in drop})
    return click.option(*names, **kw)


def _where_options(before: bool) -> list[Callable[[F], F]]:
    """The shared options that say where the locks live: the store and its table."""
    option = functools.partial(_option, before)
    return [
        option(
            "--store",
            envvar=resolve.STORE_ENV,
            metavar="URL",
            help=f"Where the locks live: {kinds.forms()} (default: "
            f"{kinds.DEFAULT.title.split()[0]}, named by the options below) [env AWSFLOCK_STORE].",
        ),
        option(
            "--tablename",
            envvar=resolve.TABLE_ENV,
            default=DEFAULT_TABLE,
            show_default=True,
            help="Lock table name [env AWSFLOCK_TABLE].",
        ),
        option("--region", envvar=resolve.REGION_ENV, help="AWS region [env AWS_REGION]."),
        option("--profile", help="AWS profile from ~/.aws/config [env AWS_PROFILE]."),
        option(
            "--endpoint-url",
            envvar=list(ENDPOINT_ENV),
            help="DynamoDB endpoint, e.g. a local server "
            "[env AWSFLOCK_ENDPOINT_URL, DYNAMO_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB].",
        ),
    ]


def _how_options(before: bool) -> list[Callable[[F], F]]:
    """The shared options that say how: the skew window, the requests' time, and stderr."""
    option = functools.partial(_option, before)
    return [
        option(
            "--skew",
            type=DurationType(durations.skew_seconds),
            default="5s",
            show_default=True,
            help="Clock-skew window: an expired lease is reclaimed only this long after expiry.",
        ),
        option(
            "--request-timeout",
            envvar=resolve.TIMEOUT_ENV,
            type=DurationType(durations.request_timeout_seconds),
            default=resolve.DEFAULT_REQUEST_TIMEOUT,
            show_default=True,
            help="How long one request to DynamoDB may take, retries included (unless the wait "
            "is longer) [env AWSFLOCK_REQUEST_TIMEOUT].",
        ),
        option("-v", "--verbose", count=True, help="More detail on stderr (-vv: debug)."),
        option("-q", "--quiet", is_flag=True, help="Only errors on stderr."),
        option(
            "--log-format",
            type=click.Choice(["text", "json"]),
            envvar="AWSFLOCK_LOG_FORMAT",
            default="text",
            show_default=True,
            help="stderr format: short text, or one JSON object per line (events, errors, "
            "warnings) [env AWSFLOCK_LOG_FORMAT].",
        ),
        option(
            "--debug",
            is_flag=True,
            is_eager=True,
            callback=_set_debug,
            help="Show tracebacks and debug logs.",
        ),
    ]


def before_command(func: F) -> F:
    """The shared options, given before the command (on the group): see ``_merged``."""
    for add in reversed(_shared(before=True)):
        func = add(func)
    return func


def common_options(func: F) -> F:
    """--store, --tablename, --region, --profile, --endpoint-url, --skew, --request-timeout,
    -v, -q, --log-format, --debug: after the command, or before it."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from awsflock.cli import logs

        names = (*VALUED, "verbose", "quiet", "debug")
        said, given = _merged({name: kwargs.pop(name) for name in names})
        rules = _said(said, given)
        found = resolve.located(rules, resolve.named_store(rules))
        common = Common(
            tablename=found.table,
            region=found.location["region"],
            profile=found.location["profile"],
            endpoint_url=found.location["endpoint_url"],
            named=found.named,
            verbose=max(said["verbose"], 2) if said["debug"] else said["verbose"],
            quiet=said["quiet"],
            log_format=said["log_format"],
            debug=said["debug"],
            skew=said["skew"],
            request_timeout=said["request_timeout"],
        )
        logs.setup(common.verbose, common.quiet, common.log_format)
        resolve.check_endpoint(found, rules)
        return func(*args, common=common, **kwargs)

    for add in reversed(_shared(before=False)):
        wrapper = add(wrapper)
    setattr(wrapper, SHARED, True)
    return wrapper  # type: ignore[return-value]


def _merged(said: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """The shared options as the command's own say them, with those given before the command
    (on the group) filled in; and the names given on the command line, in either place. A value
    given in both places must be the same (-v counts add up, flags add)."""
    ctx = click.get_current_context()
    on_line = click.core.ParameterSource.COMMANDLINE
    given = {name for name in said if ctx.get_parameter_source(name) == on_line}
    group = ctx.parent
    if group is None:
        return said, given
    before = {n: v for n, v in group.params.items() if group.get_parameter_source(n) == on_line}
    merged = dict(said)
    for name, value in before.items():
        if name == "verbose":
            merged[name] = said[name] + value
        elif name in ("quiet", "debug"):
            merged[name] = said[name] or value
        elif name in given and said[name] != value:
            option = "--" + name.replace("_", "-")
            raise errors.UsageError(
                f"{option} is given before and after the command, and differs "
                f"({value} and {said[name]})",
                hint=f"give {option} once",
            )
        else:
            merged[name] = value
    return merged, given | set(before)


def _said(said: dict[str, Any], given: set[str]) -> resolve.Said:
    """What the shared options say about the store, for the rules both the CLI and
    ``awsflock.connect()`` follow (``awsflock.stores.resolve``); click read the environment."""
    ctx = click.get_current_context()
    environment = click.core.ParameterSource.ENVIRONMENT
    endpoint_env = None
    if "endpoint_url" not in given and ctx.get_parameter_source("endpoint_url") == environment:
        import os

        endpoint_env = next((n for n in ENDPOINT_ENV if os.environ.get(n)), ENDPOINT_ENV[0])
    return resolve.Said(
        store=said["store"],
        table=said["tablename"],
        location={name: said[name] for name in kinds.LOCATION_OPTIONS},
        given=frozenset(given),
        words=resolve.CLI,
        endpoint_env=endpoint_env,
    )
