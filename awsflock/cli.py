"""The ``awsflock`` command line: parse, call the library, print, map errors to exit codes.

stdout carries results only (a LEASE_ID, JSON); everything else goes to stderr.
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import click

from awsflock import durations, errors, logs
from awsflock.options import (
    STATE,
    Common,
    DurationType,
    common_options,
    json_option,
    lease_option,
    owner_option,
    slots_option,
    wait_options,
)

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _emit(data: dict[str, Any]) -> None:
    click.echo(json.dumps(data, sort_keys=True))


def _print_lease(lease: Any, as_json: bool) -> None:
    """stdout of acquire and renew: the LEASE_ID alone (0.2.0's contract), or JSON."""
    if as_json:
        _emit(lease.as_dict())
    else:
        click.echo(lease.lease_id)


class _Cli(click.Group):
    """The top-level group: every failure becomes one stderr line and an exit code, here."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        argv = kwargs.get("args")
        argv = list(sys.argv[1:] if argv is None else argv)
        # Only awsflock's own --debug option (its callback) turns tracebacks on: a --debug in
        # run's command, after --, or as an option's value is not awsflock's.
        STATE["debug"] = False
        STATE["ran"] = False
        # Errors found while click parses come before the --log-format option is read: pick
        # the format from awsflock's own words now (the option's callback confirms it later).
        logs.set_format(self._early_log_format(argv))
        # `run` keeps 1, 2 and 3 for the command's own statuses: its own failures are 125.
        words = [a for a in argv if not a.startswith("-")]
        own = 125 if words[:1] == ["run"] else None
        sys.exit(_call(lambda: super(_Cli, self).main(*args, **kwargs), own))

    def _early_log_format(self, argv: list[str]) -> str:
        """--log-format as click will read it: the last one among awsflock's own words (not
        after --, not in run's command, not an option's value), else AWSFLOCK_LOG_FORMAT."""
        import os

        command = self.commands.get(argv[0]) if argv else None
        words = argv[1:]
        if isinstance(command, _RunCommand):
            words = command.split(words)[0]
        elif "--" in words:
            words = words[: words.index("--")]
        takes_value = _options_taking_a_value(command) if command is not None else set()
        found = ""
        i = 0
        while i < len(words):
            word = words[i]
            if word == "--log-format" and i + 1 < len(words):
                found = words[i + 1]
            elif word.startswith("--log-format="):
                found = word.partition("=")[2]
            if word in takes_value:
                i += 1  # its value is not an option
            i += 1
        if found not in logs.FORMATS:  # none, or one click will refuse
            found = os.environ.get("AWSFLOCK_LOG_FORMAT", "")
        return found if found in logs.FORMATS else "text"


def _options_taking_a_value(command: click.Command) -> set[str]:
    return {
        name
        for param in command.params
        if isinstance(param, click.Option) and not param.is_flag and not param.count
        for name in param.opts
    }


def _call(call: Any, own_failure: int | None = None) -> int:
    """Run the CLI; map every exception to an exit code and one stderr line."""

    def fail(code: int, message: str, error: str, label: str = "error", **extra: Any) -> int:
        if own_failure is not None and code in (1, 2, 3) and not STATE.get("ran"):
            code = own_failure
        logs.say(
            message, level="error", event="error", label=label, exit_code=code, error=error, **extra
        )
        return code

    try:
        result = call()
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        return fail(130, "aborted", "Abort", label="")
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: bare `awsflock`
            if logs.current_format() == "text":
                click.echo(exc.format_message(), err=True)
                return exc.exit_code
            return fail(exc.exit_code, "no command given (see 'awsflock --help')", "UsageError")
        # One line, naming the problem and where the fix is documented.
        where = exc.ctx.command_path if exc.ctx is not None else "awsflock"
        message = " ".join(exc.format_message().split())
        return fail(
            exc.exit_code,
            f"{message} (see '{where} --help')",
            type(exc).__name__,
            label="usage error",
        )
    except click.ClickException as exc:
        return fail(exc.exit_code, exc.format_message(), type(exc).__name__)
    except errors.AwsflockError as exc:
        trace = None
        if STATE["debug"]:
            import traceback

            if logs.current_format() == "text":
                traceback.print_exc()
            else:
                trace = traceback.format_exc()
        label = {2: "usage error", 3: "not held" if isinstance(exc, errors.NotHeld) else "busy"}
        return fail(
            exc.exit_code,
            exc.one_line(),
            type(exc).__name__,
            label=label.get(exc.exit_code, "error"),
            traceback=trace,
        )
    except KeyboardInterrupt:
        return fail(130, "interrupted", "KeyboardInterrupt", label="")
    except BrokenPipeError:
        return own_failure if own_failure is not None and not STATE.get("ran") else 1
    except Exception as exc:
        trace = None
        if STATE["debug"]:
            if logs.current_format() == "text":
                raise
            import traceback

            trace = traceback.format_exc()
        return fail(
            1,
            f"{type(exc).__name__}: {exc} "
            "(run again with --debug for details, and please report it)",
            type(exc).__name__,
            label="internal error",
            traceback=trace,
        )
    return result if isinstance(result, int) else 0


@click.group(cls=_Cli, context_settings=CONTEXT, no_args_is_help=True)
@click.version_option(None, "--version", package_name="awsflock", prog_name="awsflock")
def cli() -> None:
    """flock(1) for machines that share nothing but an AWS account.

    Locks are lease records in one DynamoDB table, taken and given back with
    conditional writes. `acquire` prints a LEASE_ID; `renew` and `release` take it.

    \b
    Exit codes: 0 done, 1 AWS/network/configuration error, 2 usage error,
    3 lock held by another / lease not held.

    \b
    Durations: '300', '300s', '15m', '3 minutes', '100hrs', '1 day', '2h30m'.
    """


@cli.command("table-create", context_settings=CONTEXT)
@common_options
@click.option(
    "--billing-mode",
    type=click.Choice(
        ["on-demand", "provisioned", "PAY_PER_REQUEST", "PROVISIONED"], case_sensitive=False
    ),
    default="on-demand",
    show_default=True,
    help="On-demand costs nothing while idle; provisioned uses --read/--write-capacity.",
)
@click.option(
    "--read-capacity",
    type=click.IntRange(1, 40000),
    default=5,
    show_default=True,
    help="Read capacity units (only with --billing-mode provisioned).",
)
@click.option(
    "--write-capacity",
    type=click.IntRange(1, 40000),
    default=5,
    show_default=True,
    help="Write capacity units (only with --billing-mode provisioned).",
)
def table_create(
    common: Common, billing_mode: str, read_capacity: int, write_capacity: int
) -> None:
    """Create the lock table (idempotent), wait until it is active, enable TTL.

    \b
    IAM: dynamodb:CreateTable, DescribeTable, DescribeTimeToLive, UpdateTimeToLive.
    """
    mode = "PROVISIONED" if billing_mode.lower() == "provisioned" else "PAY_PER_REQUEST"
    ctx = click.get_current_context()
    explicit = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
    given = [
        "--" + name.replace("_", "-")
        for name in ("read_capacity", "write_capacity")
        if ctx.get_parameter_source(name) in explicit
    ]
    if given and mode != "PROVISIONED":
        # Silently creating an on-demand table would ignore what the user asked for.
        named = " and ".join(given)
        verb = "apply" if len(given) > 1 else "applies"
        raise errors.UsageError(
            f"{named} only {verb} to provisioned billing, and the table would be on-demand",
            hint=f"add --billing-mode provisioned, or drop {named}",
        )
    table = common.table()

    def progress(message: str) -> None:
        if common.quiet:
            return
        if message.startswith("warning: "):
            logs.say(message[9:], level="warning", event="table_create", label="warning")
        else:
            logs.say(message, event="table_create", table=common.tablename)

    from awsflock.tables import create_table

    created = create_table(
        table.store, billing_mode=mode, capacity=(read_capacity, write_capacity), progress=progress
    )
    if not common.quiet:
        logs.say(
            f"table {common.tablename!r} is ready" + ("" if created else " (it already existed)"),
            event="table_ready",
            table=common.tablename,
            created=created,
        )


# 0.2.0's code named the command create-table while its README said table-create: keep both.
_create_table_alias = copy.copy(table_create)
_create_table_alias.hidden = True
cli.add_command(_create_table_alias, "create-table")


@cli.command("acquire", context_settings=CONTEXT)
@click.argument("lock_id", metavar="LOCK_ID")
@common_options
@lease_option("2 hours", "How long the lease lasts unless renewed.")
@wait_options
@owner_option
@json_option
@slots_option
@click.option(
    "--conflict-exit-code",
    type=click.IntRange(0, 255),
    default=3,
    show_default=True,
    help="Exit status when the lock stays held by another.",
)
def acquire(
    common: Common,
    lock_id: str,
    lease_duration: float,
    wait_time: float | None,
    no_wait: bool,
    owner: str | None,
    as_json: bool,
    conflict_exit_code: int,
    slots: int | None,
) -> None:
    """Take LOCK_ID and print the LEASE_ID (exit 3 if another holds it).

    Waits up to --wait-time (default 60s), checking about once a second.

    \b
    IAM: dynamodb:UpdateItem (and GetItem on endpoints that do not return
    the holder with a failed conditional write).
    """
    table = common.table(owner)
    wait = 0.0 if no_wait else wait_time
    try:
        lease = table.acquire(lock_id, lease=lease_duration, wait=wait, slots=slots)
    except errors.LockBusy as exc:
        if not common.quiet:
            logs.say(
                exc.one_line(),
                level="warning",
                event="busy",
                lock_id=lock_id,
                owner=exc.holder.owner if exc.holder is not None else None,
                exit_code=conflict_exit_code,
                error=type(exc).__name__,
            )
        raise click.exceptions.Exit(conflict_exit_code) from None
    _print_lease(lease, as_json)


@cli.command("renew", context_settings=CONTEXT)
@click.argument("lock_id", metavar="LOCK_ID")
@click.argument("lease_id", metavar="LEASE_ID")
@common_options
@lease_option("2 hours", "New lease length, counted from now.")
@owner_option
@json_option
def renew(
    common: Common,
    lock_id: str,
    lease_id: str,
    lease_duration: float,
    owner: str | None,
    as_json: bool,
) -> None:
    """Extend the lease LEASE_ID on LOCK_ID and print the LEASE_ID (exit 3 if not held).

    The LEASE_ID stays the same, so scripts that capture the output as awsflock
    0.2.0 taught them keep working, and so do scripts that do not.

    \b
    IAM: dynamodb:UpdateItem.
    """
    table = common.table(owner)
    lease = table.renew_lease(lock_id, lease_id, lease=lease_duration)
    _print_lease(lease, as_json)


@cli.command("release", context_settings=CONTEXT)
@click.argument("lock_id", metavar="LOCK_ID")
@click.argument("lease_id", metavar="LEASE_ID")
@common_options
@json_option
def release(common: Common, lock_id: str, lease_id: str, as_json: bool) -> None:
    """Release LOCK_ID held by LEASE_ID (exit 3 if that lease does not hold it).

    \b
    IAM: dynamodb:UpdateItem (and GetItem on endpoints that do not return
    the item with a failed conditional write).
    """
    table = common.table()
    table.release_lease(lock_id, lease_id)
    if as_json:
        _emit({"lock_id": lock_id, "released": True})


@cli.command("dev-server", context_settings=CONTEXT)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="Port on 127.0.0.1 (0 picks a free one).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the export line.")
def dev_server(port: int, quiet: bool) -> None:
    """Run a local DynamoDB-compatible endpoint (in memory) until Ctrl-C.

    Prints the line to export so that awsflock in other shells uses it; commands
    pointed at a loopback endpoint need no AWS credentials or region. Needs the
    'local' extra: pip install 'awsflock[local]'.
    """
    from awsflock.devserver import serve

    def ready(url: str) -> None:
        click.echo(f"export AWSFLOCK_ENDPOINT_URL={url}")
        sys.stdout.flush()
        if not quiet:
            logs.say(
                f"DynamoDB-compatible dev server listening on {url} (in memory; "
                "Ctrl-C stops it). In another shell: export AWSFLOCK_ENDPOINT_URL="
                f"{url}; awsflock table-create",
                event="dev_server",
                endpoint_url=url,
            )

    serve(port, ready)
    if not quiet:
        logs.say("dev server stopped", event="dev_server")


class _RunCommand(click.Command):
    """`run LOCK_ID [OPTIONS] [--] CMD [ARGS]...`: awsflock's options may come before or after
    LOCK_ID; the first word after LOCK_ID that is not an option (or everything after `--`)
    starts CMD, whose own options are never parsed by awsflock."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        head, tail = self.split(args)
        ctx.meta["awsflock.command"] = tail
        return super().parse_args(ctx, head)

    def split(self, args: list[str]) -> tuple[list[str], list[str]]:
        """(awsflock's own words, CMD and its arguments)."""
        takes_value = _options_taking_a_value(self)
        positional = 0
        i = 0
        while i < len(args):
            word = args[i]
            if word == "--":
                return args[:i], args[i + 1 :]
            if word.startswith("-") and word != "-":
                if word in takes_value:
                    i += 1  # its value
            else:
                positional += 1
                if positional == 2:
                    return args[:i], args[i:]
            i += 1
        return args, []

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "LOCK_ID [OPTIONS] [--] CMD [ARGS]...")


@cli.command("run", cls=_RunCommand, context_settings=CONTEXT)
@click.argument("lock_id", metavar="LOCK_ID")
@click.option("-c", "shell", metavar="STRING", help="Run STRING with /bin/sh -c instead of CMD.")
@common_options
@lease_option("1 minute", "Lease length; renewed every third of it while CMD runs.")
@wait_options
@owner_option
@slots_option
@click.option(
    "--kill-after",
    type=DurationType(durations.parse_seconds),
    default=None,
    show_default="10s, or lease/5 if shorter",
    help="If the lease is lost: KILL this long after TERM. An explicit value must leave the "
    "command dead before the lease ends (see above).",
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
    lock_id: str,
    shell: str | None,
    lease_duration: float,
    wait_time: float | None,
    no_wait: bool,
    owner: str | None,
    kill_after: float | None,
    conflict_exit_code: int,
    slots: int | None,
) -> None:
    """Hold LOCK_ID while CMD runs; exit with CMD's status.

    \b
      awsflock run deploy-prod -- terraform apply -auto-approve
      awsflock run --no-wait -E 0 nightly-report -- ./report.sh
      awsflock run backup -c 'pg_dump db | gzip > /backups/db.gz'

    The lease (default 1 minute) is renewed every third of its length. CMD gets
    AWSFLOCK_HELD=1, AWSFLOCK_LOCK_ID, AWSFLOCK_OWNER, AWSFLOCK_FENCING_TOKEN
    (and AWSFLOCK_SLOT with --slots).
    Signals INT, TERM, HUP, QUIT, USR1, USR2 are forwarded to CMD's process group.

    If the lease is lost (a renewal refused, or none succeeded by kill-after + G
    before expiry, G = 1s or lease/10 if shorter), CMD's group gets TERM, then
    KILL after --kill-after, so CMD is dead G before its lease ends. An explicit
    --kill-after must satisfy kill-after + G < 2/3 of the lease, so renewal gets
    its chance first; the default (10s, or lease/5) always does.

    \b
    Exit: CMD's status; 75 lock not acquired (-E overrides); 124 lease lost and
    CMD stopped; 125 awsflock failed; 126 CMD not executable; 127 CMD not found;
    128+N CMD killed by signal N.
    """
    from awsflock.runner import RunOptions, run

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
        wait=0.0 if no_wait else wait_time,
        kill_after=kill_after,
        conflict_exit_code=conflict_exit_code,
        slots=slots,
    )
    code = run(table, lock_id, argv, options)
    STATE["ran"] = True
    raise click.exceptions.Exit(code)


@cli.command("status", context_settings=CONTEXT)
@click.argument("lock_id", metavar="LOCK_ID")
@common_options
@json_option
@click.option("--show-lease-id", is_flag=True, help="Also show the holder's LEASE_ID.")
@slots_option
def status(
    common: Common, lock_id: str, as_json: bool, show_lease_id: bool, slots: int | None
) -> None:
    """Who holds LOCK_ID, since when, until when, with which fencing token.

    For a pool (--slots, or a name only used as a pool) every slot is shown.
    Exit 0 if held (a pool: any slot), 3 if free (released, never taken, or
    expired and not yet reclaimed), 1 on errors.

    \b
    IAM: dynamodb:GetItem.
    """
    from awsflock.lease import check_lock_id, check_slots
    from awsflock.status import HELD, pool_view, render_pool, render_status, view

    table = common.table()
    check_lock_id(lock_id)
    pool_size = check_slots(lock_id, slots)
    current = table.store.read(lock_id)
    pool = current.pool
    now = table.clock.time()
    if pool is not None:
        if pool_size and pool.size and pool.size != pool_size:
            raise errors.ConfigurationError(
                f"pool {lock_id!r} has {pool.size} slots, not {pool_size}",
                hint=f"use --slots {pool.size}",
            )
        data = pool_view(pool, now, table.skew, show_lease_id)
        text = render_pool(data)
    else:
        data = view(lock_id, current.lock, now, table.skew, show_lease_id)
        text = render_status(data)
    if as_json:
        _emit(data)
    else:
        click.echo(text)
    raise click.exceptions.Exit(0 if data["state"] == HELD else 3)


@cli.command("list", context_settings=CONTEXT)
@common_options
@click.option("--prefix", default="", help="Only locks whose name starts with this.")
@click.option("--held", "only", flag_value="held", help="Only locks held now.")
@click.option("--expired", "only", flag_value="expired", help="Only expired, unreclaimed ones.")
@json_option
def list_locks(common: Common, prefix: str, only: str | None, as_json: bool) -> None:
    """Every lock in the table, streamed page by page.

    Rows come in DynamoDB's scan order, which is not sorted (sorting would mean
    holding the whole table in memory). --json prints one object per line.

    \b
    IAM: dynamodb:Scan, and DescribeTable (to check first that the table is
    an awsflock table; skipped where it is denied).
    """
    from awsflock.records import LockRecord
    from awsflock.status import LIST_HEADER, pool_view, render_list_row, view

    table = common.table()
    header = not as_json  # printed with the first page, so an error leaves stdout empty
    for entry in table.store.scan_locks(prefix):
        now = table.clock.time()
        if isinstance(entry, LockRecord):
            data = view(entry.lock_id, entry, now, table.skew)
        else:
            data = pool_view(entry, now, table.skew)
        if only and data["state"] != only:
            continue
        if header:
            click.echo(LIST_HEADER)
            header = False
        click.echo(json.dumps(data, sort_keys=True) if as_json else render_list_row(data))
    if header:
        click.echo(LIST_HEADER)


@cli.command("force-release", context_settings=CONTEXT)
@click.argument("lock_id", metavar="LOCK_ID")
@common_options
@click.option("--reason", required=True, help="Why; kept in the audit record. Required.")
@click.option("--lease-id", help="The lease to end (as `status --show-lease-id` shows it).")
@click.option("--yes", is_flag=True, help="Do not ask; end whatever lease holds it now.")
@click.option("--actor", help="Who is doing this (default: AWS caller identity, or user@host).")
@click.option("--slot", type=click.IntRange(0, 99), help="For a pool: the slot to end.")
@json_option
def force_release_command(
    common: Common,
    lock_id: str,
    reason: str,
    lease_id: str | None,
    yes: bool,
    actor: str | None,
    slot: int | None,
    as_json: bool,
) -> None:
    """End the current lease on LOCK_ID, whoever holds it, and audit it.

    The lease must be named: --lease-id ID, or an interactive confirmation that
    shows the holder, or --yes. The write is conditional on exactly that lease,
    so a holder that acquired in between is never affected; fencing tokens keep
    going up. The holder's next renewal fails (`awsflock run` stops its command).

    \b
    IAM: dynamodb:GetItem, UpdateItem, PutItem (the audit record).
    """
    from awsflock.admin import force_release

    table = common.table()
    confirm = None
    if lease_id is None:
        if yes:
            confirm = _yes
        elif sys.stdin.isatty():
            if common.log_format == "json":
                # A question and its answer at a terminal are not JSON lines.
                raise errors.UsageError(
                    "force-release cannot ask for confirmation under --log-format json",
                    hint="pass --lease-id ID (see `awsflock status --show-lease-id`) or --yes",
                )
            confirm = _ask
    entry = force_release(
        table, lock_id, reason=reason, lease_id=lease_id, actor=actor, confirm=confirm, slot=slot
    )
    if as_json:
        _emit(entry)
    elif not common.quiet:
        logs.say(
            f"force-released {lock_id!r} (was held by {entry['holder']}); audited",
            event="force_release_done",
            lock_id=lock_id,
            owner=entry["holder"],
            fencing_token=entry["fencing_token"],
        )


def _yes(record: Any) -> bool:
    return True


def _ask(record: Any) -> bool:
    import time

    logs.say(f"{record.lock_id!r} is held by {record.describe(time.time())}", event="confirm")
    return click.confirm("End this lease now?", default=False, err=True)


@cli.command("pool-resize", context_settings=CONTEXT)
@click.argument("lock_id", metavar="LOCK_ID")
@common_options
@click.option("--slots", type=click.IntRange(2, 100), required=True, help="The new size.")
def pool_resize(common: Common, lock_id: str, slots: int) -> None:
    """Change the number of slots of pool LOCK_ID.

    Growing is immediate. Shrinking needs the slots that go away to be free.
    Holders still using the old --slots get a clear error until they are
    changed too.

    \b
    IAM: dynamodb:GetItem, UpdateItem.
    """
    from awsflock.admin import resize_pool

    old, new = resize_pool(common.table(), lock_id, slots)
    if not common.quiet:
        logs.say(
            f"pool {lock_id!r} now has {new} slots (was {old})",
            event="pool_resize_done",
            lock_id=lock_id,
        )


@cli.command("audit", context_settings=CONTEXT)
@click.argument("lock_id", metavar="[LOCK_ID]", required=False, default="")
@common_options
@json_option
def audit(common: Common, lock_id: str, as_json: bool) -> None:
    """List audit records (force-releases), oldest first, for one lock or all.

    \b
    IAM: dynamodb:Scan, and DescribeTable (as for list).
    """
    from awsflock.admin import audit_records

    for entry in audit_records(common.table(), lock_id):
        if as_json:
            _emit(entry)
        else:
            click.echo(
                f"{entry['at']}  {entry['action']}  {entry['lock_id']}  by {entry['actor']}  "
                f"(holder {entry['holder']}, token {entry['fencing_token']}): {entry['reason']}"
            )


@cli.command("iam-policy", context_settings=CONTEXT)
@click.option("--tablename", envvar="AWSFLOCK_TABLE", default="awsflock", show_default=True)
@click.option("--read-only", is_flag=True, help="Only what status, list and audit need.")
@click.option("--region", default="*", show_default=True, help="Region in the table ARN.")
@click.option("--account", default="*", show_default=True, help="Account id in the table ARN.")
def iam_policy_command(tablename: str, read_only: bool, region: str, account: str) -> None:
    """Print the least-privilege IAM policy for the lock table.

    The "AwsflockTableSetup" statement is only for whoever runs table-create.
    """
    from awsflock.admin import iam_policy

    click.echo(iam_policy(tablename, read_only=read_only, region=region, account=account))


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    cli.main(args=argv, prog_name="awsflock")


__all__ = ["DurationType", "cli", "main"]
