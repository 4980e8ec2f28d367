"""The options of the commands that take a lock (``acquire``, ``run``, the keep-alive
renewer): the lease, the wait (and what --no-wait with --wait-time means), the owner, JSON
output, pool slots and fair waiting. The options every command shares are in ``options``."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import click

from awsflock import durations, errors
from awsflock.cli.options import DurationType

F = TypeVar("F", bound=Callable[..., Any])


def lease_option(default: str, help_text: str) -> Callable[[F], F]:
    return click.option(
        "--lease-duration",
        "lease_duration",
        type=DurationType(durations.lease_seconds),
        default=default,
        show_default=True,
        help=help_text,
    )


def wait_options(func: F) -> F:
    """--wait-time and --no-wait, as in awsflock 0.2.0 (0 means wait forever), and as -w and
    -n, as in flock(1)."""
    func = click.option(
        "-n",
        "--no-wait",
        is_flag=True,
        help="Try once; do not wait if the lock is held (ends within one request timeout).",
    )(func)
    func = click.option(
        "-w",
        "--wait-time",
        type=DurationType(durations.wait_seconds),
        default="60",
        show_default=True,
        help="How long to wait for the lock, in seconds or as a duration; 0 waits forever. "
        "Ends within this plus one request timeout, whatever the store does.",
    )(func)
    return func


def wait_of(
    no_wait: bool, wait_time: float | None, *, old_command: bool = False, quiet: bool = False
) -> float | None:
    """The wait --no-wait and --wait-time ask for (0: try once; None: forever). Both given is a
    contradiction: refused, except by ``acquire`` (``old_command``), whose scripts written for
    awsflock 0.2.0 may say both: there --no-wait wins, as it did, with a warning."""
    ctx = click.get_current_context()
    on_line = click.core.ParameterSource.COMMANDLINE
    if not no_wait or ctx.get_parameter_source("wait_time") != on_line:
        return 0.0 if no_wait else wait_time
    if not old_command:
        raise errors.UsageError(
            "--no-wait and --wait-time contradict each other", hint="give one of them"
        )
    from awsflock.cli import logs

    if not quiet:
        logs.say(
            "--no-wait and --wait-time contradict each other: trying once, as awsflock 0.2.0 "
            "did (drop one of them)",
            level="warning",
            label="warning",
            event="usage_warning",
        )
    return 0.0


def owner_option(func: F) -> F:
    return click.option(
        "--owner",
        callback=_checked_owner,
        help="Who holds the lock, shown to waiters (default: this host's name).",
    )(func)


def _checked_owner(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from awsflock.names import check_owner

    return None if value is None else check_owner(value)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")(func)


def slots_option(func: F) -> F:
    return click.option(
        "--slots",
        type=click.IntRange(1, 100),
        default=None,
        help="Make LOCK_ID a pool of N slots: up to N holders at once, each told its slot.",
    )(func)


def fair_option(func: F) -> F:
    return click.option(
        "--fair",
        is_flag=True,
        envvar="AWSFLOCK_FAIR",
        help="Wait in line: waiters are served in order of arrival, and each is shown its "
        "place [env AWSFLOCK_FAIR=1].",
    )(func)


def terms_options(func: F) -> F:
    """``--lock-delay`` and ``--max-hold``: what the holder records with its lease
    (``awsflock.lock.terms``)."""
    func = click.option(
        "--max-hold",
        type=DurationType(durations.hold_seconds),
        default=None,
        metavar="DURATION",
        help="Hold the lock at most DURATION from the grant: no renewal extends the lease "
        "past it, and the work is stopped there. [default: none]",
    )(func)
    return click.option(
        "--lock-delay",
        type=DurationType(durations.delay_seconds),
        default=0.0,
        metavar="DURATION",
        help="Should this lease end without its release (it runs out, or is force-released), "
        "grant the lock to nobody until that end plus DURATION: time for a hung holder's "
        "late writes to land. A release frees it at once. [default: none]",
    )(func)


def shared_option(func: F) -> F:
    return click.option(
        "--shared",
        is_flag=True,
        help="Hold LOCK_ID beside any other --shared holder, never beside an exclusive one "
        "(readers and a writer); a waiting exclusive acquire keeps new shares out.",
    )(func)


def state_file_option(said: str) -> Callable[[F], F]:
    """``--state-file PATH``: the lock's state as a file (``awsflock.state``)."""
    return click.option(
        "--state-file",
        type=click.Path(dir_okay=False),
        default=None,
        metavar="PATH",
        help=said + " At most 4096 bytes; a plain lock's only.",
    )
