"""The lock commands scripts use: ``acquire``, ``renew``, ``release``."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import click

from awsflock import errors, metrics
from awsflock.cli import kept, logs, state_files
from awsflock.cli.app import CONTEXT, cli, emit, if_interrupted, print_lease
from awsflock.cli.lock_options import (
    fair_option,
    json_option,
    lease_option,
    owner_option,
    shared_option,
    slots_option,
    state_file_option,
    terms_options,
    wait_of,
    wait_options,
)
from awsflock.cli.options import Common, common_options
from awsflock.lock import renewal
from awsflock.names import check_lease_id

#: The largest pid Linux hands out (pid_max's limit).
PID_MAX = 4_194_304

if TYPE_CHECKING:
    from awsflock.lock.lease import Lease, LockTable
    from awsflock.lock.set_table import LeaseSet
    from awsflock.supervise.keepalive_plan import KeepAlive


@cli.command("acquire", context_settings=CONTEXT)
@click.argument("lock_ids", metavar="LOCK_ID...", nargs=-1, required=True)
@common_options
@lease_option("2 hours", "How long the lease lasts unless renewed.")
@wait_options
@owner_option
@json_option
@slots_option
@fair_option
@shared_option
@terms_options
@state_file_option(
    "Write the lock's state, as the last holder left it, to PATH at the grant (an empty file "
    "where none was written); `renew --state-file` writes it."
)
@click.option(
    "--keep-alive",
    is_flag=True,
    help="Keep the lease alive in the background while the calling shell lives (a short "
    f"lease, 1 minute unless --lease-duration says otherwise, renewed {renewal.POLICY.said}), "
    "and "
    "release it when that shell exits. `release` stops the renewer.",
)
@click.option(
    "--while-pid",
    type=click.IntRange(1, PID_MAX),
    metavar="PID",
    help="With --keep-alive: follow process PID instead of the calling shell (e.g. $$ in a "
    "script, $PPID in a GitHub Actions step). Implies --keep-alive.",
)
@click.option(
    "-E",
    "--conflict-exit-code",
    type=click.IntRange(0, 255),
    default=3,
    show_default=True,
    help="Exit status when the lock stays held by another; with 0, the holder is named only "
    "under -v.",
)
def acquire(
    common: Common,
    lock_ids: tuple[str, ...],
    lease_duration: float,
    wait_time: float | None,
    no_wait: bool,
    owner: str | None,
    as_json: bool,
    conflict_exit_code: int,
    slots: int | None,
    fair: bool,
    shared: bool,
    lock_delay: float,
    max_hold: float | None,
    state_file: str | None,
    keep_alive: bool,
    while_pid: int | None,
) -> None:
    """Take LOCK_ID and print the LEASE_ID (exit 3 if another holds it).

    Waits up to --wait-time (default 60s), checking about once a second. With
    --fair, waiters are served in order of arrival; without it, an acquire
    never goes ahead of a live --fair waiter. With --shared, any number of
    shared holders hold it together, and an exclusive acquire waits for them.

    Several LOCK_IDs are taken together in one request, or none is: one
    LEASE_ID for all of them (renew and release it with the same names), a
    fencing token each (--json).

    \b
    IAM: dynamodb:UpdateItem (and GetItem on endpoints that do not return
    the holder with a failed conditional write; BatchGetItem with
    --state-file).
    """
    lock_id = _set_or_one(lock_ids, slots=slots, fair=fair, shared=shared)
    # Until the wait's own signal handling takes over, Ctrl-C can only come before it.
    if_interrupted(f" while waiting for {lock_id!r}; nothing is held")
    keeping = keep_alive or while_pid
    plan = kept.plan_keep_alive(lock_id, while_pid, lease_duration) if keeping else None
    lease_duration = plan.lease_s if plan is not None else lease_duration
    table = common.table(owner)
    kept.name_the_script(table, plan.follow if plan is not None else 0)
    wait = wait_of(no_wait, wait_time, old_command=True, quiet=common.quiet)
    asked = lock_ids if len(lock_ids) > 1 else lock_id
    options: dict[str, Any] = {"lease": lease_duration, "wait": wait, "slots": slots, "fair": fair}
    options["lock_delay"], options["max_hold"] = lock_delay, max_hold
    options["state"], options["state_file"] = state_file is not None, state_file
    _take(common, table, asked, lock_id, plan, as_json, conflict_exit_code, shared, options)


def _take(
    common: Common,
    table: LockTable,
    asked: str | tuple[str, ...],
    lock_id: str,
    plan: KeepAlive | None,
    as_json: bool,
    conflict_exit_code: int,
    shared: bool,
    options: dict[str, Any],
) -> None:
    """``acquire``'s wait and grant: the LEASE_ID printed, or the exit that says why not."""
    wait, fair, state_file = options["wait"], options["fair"], options.pop("state_file")
    if state_file is not None:
        state_files.check(state_file)  # before the lock is taken
    # From the wait until the LEASE_ID is printed, TERM, INT and HUP are recorded: a signal
    # ends the wait cleanly, and one that comes with the grant gives the lease back (or, once
    # the LEASE_ID is out, names it), never leaving a lease held that nobody was told of.
    with stopped_by_signals(signal.SIGINT) as (cancel, received):
        try:
            lease = table.acquire(asked, **options, shared=shared, cancel=cancel)
        except errors.Cancelled:
            _interrupted(
                received,
                lock_id,
                f"while waiting for {lock_id!r}; nothing is held"
                + (" and the place in line was given up" if fair else ""),
            )
        except errors.LockBusy as exc:
            _say_busy(common, exc, lock_id, wait, conflict_exit_code)
            raise click.exceptions.Exit(conflict_exit_code) from None
        if state_file is not None:
            state_files.seed_or_give_back(table, lease, state_file)
        _hand_over(common, table, lease, lock_id, plan, as_json, cancel, received)


def _set_or_one(lock_ids: tuple[str, ...], **one_lock_only: object) -> str:
    """The lock's name for messages: the one named, or the names of a set joined ("a, b"),
    after refusing what only one lock can have (--slots, --fair, --shared)."""
    if len(lock_ids) == 1:
        return lock_ids[0]
    given = [name for name, value in one_lock_only.items() if value]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise errors.UsageError(
            f"{flags} takes one LOCK_ID; {len(lock_ids)} were given",
            hint="take that lock on its own, or drop " + flags,
        )
    return ", ".join(lock_ids)


def _say_busy(
    common: Common, exc: errors.LockBusy, lock_id: str, wait: float | None, conflict_exit_code: int
) -> None:
    """Say that the lock stays held by another. As run: a held lock that is not a failure
    (-E 0) is said only when asked (-v)."""
    if common.quiet or (conflict_exit_code == 0 and not common.verbose):
        return
    logs.say(
        exc.one_line(),
        level="warning",
        event="busy",
        lock_id=lock_id,
        owner=exc.holder.owner if exc.holder is not None else None,
        exit_code=conflict_exit_code,
        error=type(exc).__name__,
        outcome=metrics.BUSY if wait == 0 else metrics.TIMED_OUT,
    )


def _hand_over(
    common: Common,
    table: LockTable,
    lease: Lease | LeaseSet,
    lock_id: str,
    plan: KeepAlive | None,
    as_json: bool,
    cancel: threading.Event,
    received: list[int],
) -> None:
    """Hand a lease just granted to the script: start its renewer (``plan``), then print its
    LEASE_ID. A signal that came with the grant gives it back, as does a failure to print."""
    if received:
        kept.give_back(table, lease)
        _interrupted(received, lock_id, f"just after {lock_id!r} was granted; gave it back")
    if plan is not None:
        try:
            kept.start_renewer(common, table, lease, plan.follow, plan.started, cancel)
        except errors.Cancelled:
            _interrupted(
                received,
                lock_id,
                f"while the keep-alive renewer of {lock_id!r} started; gave the lease back",
            )
    _print_or_give_back(table, lease, lock_id, as_json)
    if_interrupted("")  # the LEASE_ID is out: the script has the lease
    if received and plan is not None:  # after the LEASE_ID is out: kept alive for the script
        _interrupted(
            received,
            lock_id,
            f"after {lock_id!r} was granted and its LEASE_ID printed; it is kept alive for "
            f"pid {plan.follow}: free it with `awsflock release {lock_id} {lease.lease_id}`",
        )


def _print_or_give_back(
    table: LockTable, lease: Lease | LeaseSet, lock_id: str, as_json: bool
) -> None:
    """Print the LEASE_ID; if it cannot be written, nobody will ever know it: the lease is
    given back (and a keep-alive renewer then finds it ended and stops)."""
    try:
        print_lease(lease, as_json)
    except OSError as exc:
        kept.give_back(table, lease)
        raise errors.AwsflockError(
            f"could not write the LEASE_ID to stdout ({exc.strerror or exc}): gave the "
            f"lease on {lock_id!r} back",
            hint="read acquire's output, e.g. ID=$(awsflock acquire ...)",
        ) from None


def _interrupted(received: list[int], lock_id: str, what: str) -> NoReturn:
    """Say that signal ``received[0]`` (TERM if none) interrupted ``what``; exit 128 + it."""
    signum = received[0] if received else signal.SIGTERM
    logs.say(
        f"interrupted by signal {signum} {what}",
        level="warning",
        label="warning",
        event="interrupted",
        lock_id=lock_id,
        exit_code=128 + signum,
    )
    raise click.exceptions.Exit(128 + signum)


@contextlib.contextmanager
def stopped_by_signals(*more: int) -> Iterator[tuple[threading.Event, list[int]]]:
    """While inside, TERM and HUP (and ``more``) are recorded and set ``cancel`` rather than
    kill us: a waiting acquire ends through it and cleans up (its attempts are released and its
    place in line given up; INT does so by KeyboardInterrupt), and a renewer that is starting
    is stopped and its lease given back, rather than left held with nothing printed."""
    cancel, received = threading.Event(), []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        cancel.set()

    if threading.current_thread() is not threading.main_thread():
        yield cancel, received  # signal handlers can only be set in the main thread
        return
    signals = (signal.SIGTERM, signal.SIGHUP, *more)
    previous = {sig: signal.signal(sig, on_signal) for sig in signals}
    try:
        yield cancel, received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@cli.command("renew", context_settings=CONTEXT)
@click.argument("lock_ids", metavar="LOCK_ID...", nargs=-1, required=True)
@click.argument("lease_id", metavar="LEASE_ID")
@common_options
@lease_option("2 hours", "New lease length, counted from now.")
@owner_option
@json_option
@state_file_option("Write PATH's content as the lock's state, with the renewal.")
def renew(
    common: Common,
    lock_ids: tuple[str, ...],
    lease_id: str,
    lease_duration: float,
    owner: str | None,
    as_json: bool,
    state_file: str | None,
) -> None:
    """Extend the lease LEASE_ID on LOCK_ID and print the LEASE_ID (exit 3 if not held).

    The LEASE_ID stays the same, so scripts that capture the output as awsflock
    0.2.0 taught them keep working, and so do scripts that do not. The
    LEASE_ID of several locks taken together renews them all, named as acquired.

    \b
    IAM: dynamodb:UpdateItem (and GetItem with --state-file).
    """
    table = common.table(owner)
    from awsflock.supervise import renewers

    lease: Lease | LeaseSet
    if _of_a_set(lock_ids, lease_id):
        from awsflock.lock.set_table import LeaseSet

        if state_file is not None:
            raise errors.UsageError(
                "state is kept with a plain lock, not with a set of locks",
                hint="drop --state-file, or keep the state under a plain lock",
            )
        leases = table.renew_set_lease(lock_ids, lease_id, lease=lease_duration)
        lease = LeaseSet(table, check_lease_id(lease_id), leases)
    elif state_file is not None:
        lease = state_files.write(table, lock_ids[0], lease_id, lease_duration, state_file)
    else:
        lease = table.renew_lease(lock_ids[0], lease_id, lease=lease_duration)
    # A renewer keeping it alive renews at once with its own length, so a shorter renew here
    # cannot let the lease run out between its renewals.
    renewers.renew_now(lease.lease_id, lock_ids)
    print_lease(lease, as_json)


@cli.command("release", context_settings=CONTEXT)
@click.argument("lock_ids", metavar="LOCK_ID...", nargs=-1, required=True)
@click.argument("lease_id", metavar="LEASE_ID")
@common_options
@json_option
def release(common: Common, lock_ids: tuple[str, ...], lease_id: str, as_json: bool) -> None:
    """Release LOCK_ID held by LEASE_ID (exit 3 if that lease does not hold it).

    The LEASE_ID of several locks taken together releases them all in one
    request, named as acquired.

    \b
    IAM: dynamodb:UpdateItem (and GetItem on endpoints that do not return
    the item with a failed conditional write).
    """
    from awsflock.supervise import renewers

    table = common.table()
    lease_id = check_lease_id(lease_id)
    several = _of_a_set(lock_ids, lease_id)
    try:
        if several:
            table.release_set_lease(lock_ids, lease_id)
        else:
            table.release_lease(lock_ids[0], lease_id)
    except errors.NotHeld:
        renewers.stop(lease_id, lock_ids)  # ended already: its renewer has nothing to keep
        raise
    # Released: a renewer of it on this host (acquire --keep-alive) stops, without ending
    # anything. If the release failed otherwise, the renewer goes on, and ends the lease
    # when the process it follows is gone.
    renewers.stop(lease_id, lock_ids)
    if as_json:
        emit(
            {
                **({"lock_ids": list(lock_ids)} if several else {"lock_id": lock_ids[0]}),
                "released": True,
            }
        )


def _of_a_set(lock_ids: tuple[str, ...], lease_id: str) -> bool:
    """Whether ``lease_id`` is a set's (``awsflock.sets``), refusing several names with the
    LEASE_ID of one lock."""
    from awsflock import sets

    if sets.is_set_id(check_lease_id(lease_id)):
        return True
    if len(lock_ids) > 1:
        raise errors.UsageError(
            f"{len(lock_ids)} LOCK_IDs with the LEASE_ID of one lock",
            hint="name the one lock that LEASE_ID holds (acquire printed it for that name)",
        )
    return False
