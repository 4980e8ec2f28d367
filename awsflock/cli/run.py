"""``awsflock run``: hold a lock while a command runs (the work is in
``awsflock.supervise.runner``)."""

from __future__ import annotations

import click

from awsflock import durations, errors
from awsflock.cli.app import CONTEXT, RunCommand, cli, if_interrupted
from awsflock.cli.lock_options import (
    fair_option,
    lease_option,
    owner_option,
    shared_option,
    slots_option,
    state_file_option,
    terms_options,
    wait_of,
    wait_options,
)
from awsflock.cli.options import STATE, Common, DurationType, common_options
from awsflock.lock import renewal
from awsflock.supervise.group import HOLD_UNTIL

#: run's --help and man page. It states the renewal policy's numbers (awsflock.lock.renewal),
#: not copies of them.
HELP = """Hold LOCK_ID while CMD runs; exit with CMD's status.

\b
  awsflock run deploy-prod -- terraform apply -auto-approve
  awsflock run --no-wait -E 0 nightly-report -- ./report.sh
  awsflock run backup -c 'pg_dump db | gzip > /backups/db.gz'
  awsflock run network db app-prod -- ./deploy.sh

Several LOCK_IDs (ended by `--`, or after -c STRING) are taken together in
one request, or none is: nothing is held while another is waited for.

The lease (default 1 minute) is renewed {said}. CMD gets
AWSFLOCK_HELD=1, AWSFLOCK_LOCK_ID, AWSFLOCK_OWNER, AWSFLOCK_FENCING_TOKEN,
AWSFLOCK_PREVIOUS (how the lease before ended: first, released, expired,
forced) (and AWSFLOCK_SLOT with --slots); and for each lock, in the order
named, AWSFLOCK_LOCK_ID_N, AWSFLOCK_FENCING_TOKEN_N and AWSFLOCK_PREVIOUS_N
(N from 1), with AWSFLOCK_LOCKS, their count. With several, AWSFLOCK_LOCK_ID
holds the names, one per line, and AWSFLOCK_FENCING_TOKEN and
AWSFLOCK_PREVIOUS are not set. When the lease before was not released by its
holder, stderr says so in one line naming that holder (not with -q). With
--state-file PATH, CMD gets AWSFLOCK_STATE_FILE: the lock's state as the
last holder left it; what CMD writes there is kept for the next holder.
Signals INT, TERM, HUP, QUIT, USR1, USR2 are forwarded to CMD's process group.

As flock(1) holds its lock while any process still has the lock file open,
run holds the lock until CMD and every process left in CMD's process group
(a script's `cmd &`) have exited; what leaves the group (setsid, set -m,
timeout without --foreground) is not waited for. If CMD was interrupted
(ended by INT, TERM, HUP or QUIT, or exited 128+N for one), or awsflock was
sent one of those, what is left in the group gets TERM, then KILL after
--kill-after. --hold-until command releases when CMD itself exits.

If the lease is lost (a renewal refused, or none succeeded by kill-after + G
before expiry, G = 1s or lease/10 if shorter), CMD's group gets TERM, then
KILL after --kill-after, so CMD is dead G before its lease ends; the lock is
released once the group is empty. An explicit
--kill-after must satisfy kill-after + G < lease - lease/{per}, so renewal gets
its chance first; the default (10s, or lease/5) always does.

\b
Exit: CMD's status; 75 lock not acquired (-E overrides); 123 the hold
reached --max-hold and CMD was stopped; 124 lease lost and CMD stopped; 125
awsflock failed (or CMD exited 0 and its last --state-file content was not
written); 126 CMD not executable; 127 CMD not found; 128+N CMD killed by
signal N.
""".format(
    said=f"{renewal.POLICY.said.replace(' of it', ' of its length')}",
    per=renewal.POLICY.per_lease,
)


@cli.command("run", cls=RunCommand, context_settings=CONTEXT, help=HELP)
@click.argument("lock_ids", metavar="LOCK_ID...", nargs=-1, required=True)
@click.option("-c", "shell", metavar="STRING", help="Run STRING with /bin/sh -c instead of CMD.")
@common_options
@lease_option("1 minute", f"Lease length; renewed {renewal.POLICY.said} while CMD runs.")
@wait_options
@owner_option
@slots_option
@fair_option
@shared_option
@terms_options
@state_file_option(
    "Write the lock's state to PATH at the grant (empty where none was written) and give "
    "CMD its path as AWSFLOCK_STATE_FILE; PATH, changed, is written as the state with the "
    "next renewal and when CMD ends (write it whole: a new file renamed over PATH)."
)
@click.option(
    "--notify-after",
    type=(DurationType(durations.hold_seconds), str),
    default=None,
    metavar="DURATION CMD2",
    help="Once the lock has been held for DURATION, run CMD2 with sh -c, once, not waited "
    "for (a page for the on-call); it gets CMD's environment and AWSFLOCK_HELD_FOR.",
)
@click.option(
    "--kill-after",
    type=DurationType(durations.parse_seconds),
    default=None,
    show_default="10s, or lease/5 if shorter",
    help="If the lease is lost: KILL this long after TERM. An explicit value must leave the "
    "command dead before the lease ends (see above).",
)
@click.option(
    "--hold-until",
    type=click.Choice(HOLD_UNTIL),
    default="group",
    show_default=True,
    help="Hold the lock until CMD and every process left in its process group have exited "
    "(background jobs of a script), or until CMD itself exits ('command').",
)
@click.option(
    "-E",
    "--conflict-exit-code",
    type=click.IntRange(0, 255),
    default=75,
    show_default=True,
    help="Exit status when the lock was not acquired (--no-wait or wait timed out).",
)
def run_command(
    common: Common,
    lock_ids: tuple[str, ...],
    shell: str | None,
    lease_duration: float,
    wait_time: float | None,
    no_wait: bool,
    owner: str | None,
    kill_after: float | None,
    conflict_exit_code: int,
    hold_until: str,
    slots: int | None,
    fair: bool,
    shared: bool,
    lock_delay: float,
    max_hold: float | None,
    state_file: str | None,
    notify_after: tuple[float, str] | None,
) -> None:
    """``run`` (its help is ``HELP``): the lock held while CMD runs, by the runner."""
    # Until the runner's signal handling takes over, Ctrl-C can only come before the wait.
    if_interrupted(" while waiting; the command was not started")
    from awsflock.supervise.runner import RunOptions, run

    command = click.get_current_context().meta.get("awsflock.command", [])
    if shell is not None and command:
        raise errors.UsageError("give either -c STRING or a command, not both")
    argv = ["/bin/sh", "-c", shell] if shell is not None else list(command)
    import shlex

    from awsflock.records import Identity

    table = common.table(owner)
    table.identity = Identity.of_this_process(owner, command=shlex.join(argv)[:300])
    options = RunOptions(
        lease=lease_duration,
        wait=wait_of(no_wait, wait_time),
        kill_after=kill_after,
        conflict_exit_code=conflict_exit_code,
        slots=slots,
        fair=fair,
        shared=shared,
        hold_until=hold_until,
        lock_delay=lock_delay,
        max_hold=max_hold,
        notify_after=notify_after,
        state_file=state_file,
    )
    if shell is None:
        _no_command_among(lock_ids)
    _one_lock_only(lock_ids, slots, fair, shared)
    code = run(table, lock_ids[0] if len(lock_ids) == 1 else lock_ids, argv, options)
    if_interrupted("")
    STATE["ran"] = True
    raise click.exceptions.Exit(code)


def _one_lock_only(lock_ids: tuple[str, ...], slots: int | None, fair: bool, shared: bool) -> None:
    """Refuse what only one lock can have (--slots, --fair, --shared) with several names."""
    flags = (("--slots", slots is not None), ("--fair", fair), ("--shared", shared))
    given = [flag for flag, on in flags if on]
    if len(lock_ids) > 1 and given:
        raise errors.UsageError(
            f"{', '.join(given)} takes one LOCK_ID; {len(lock_ids)} were given",
            hint="take that lock on its own",
        )


def _no_command_among(lock_ids: tuple[str, ...]) -> None:
    """Refuse a second lock name that is a command on PATH: the names end at `--`, so
    `run L ssh host -- cmd` would hold "ssh" and "host" and run cmd here (found by a review).
    The first name is never CMD, so a lock named like a command can come first."""
    import shlex
    import shutil

    for name in lock_ids[1:]:
        if shutil.which(name) is not None:
            raise errors.UsageError(
                f"{name!r} is a command, but here it is a lock name (the names end at --)",
                hint=f"to run it, put -- after the lock name: awsflock run "
                f"{shlex.quote(lock_ids[0])} -- {shlex.quote(name)} ...",
            )
