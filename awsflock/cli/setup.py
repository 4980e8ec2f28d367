"""Setting up: ``table-create`` (and its 0.2.0 name ``create-table``), ``iam-policy``,
``grants`` (PostgreSQL's counterpart), ``dev-server``."""

from __future__ import annotations

import copy
import sys

import click

from awsflock import errors
from awsflock.cli import logs
from awsflock.cli.app import CONTEXT, cli
from awsflock.cli.options import (
    Common,
    common_options,
)
from awsflock.stores import kinds


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
    if "billing_mode" not in common.kind.create_options and (mode == "PROVISIONED" or given):
        raise errors.UsageError(
            "--billing-mode and the capacity options apply to DynamoDB, and --store names a "
            f"{common.kind.title}",
            hint="drop them",
        )
    table = common.table()

    def progress(message: str) -> None:
        if common.quiet:
            return
        if message.startswith("warning: "):
            logs.say(message[9:], level="warning", event="table_create", label="warning")
        else:
            logs.say(message, event="table_create", table=common.tablename)

    # On-demand is every store's default: only provisioned capacity is an option to pass.
    options = {}
    if mode == "PROVISIONED":
        options = {"billing_mode": mode, "capacity": (read_capacity, write_capacity)}
    created = table.create(progress=progress, **options)
    if not common.quiet:
        logs.say(
            f"{common.kind.place} {common.tablename!r} is ready"
            + ("" if created else " (it already existed)"),
            event="table_ready",
            table=common.tablename,
            created=created,
        )


# 0.2.0's code named the command create-table while its README said table-create: keep both.
_create_table_alias = copy.copy(table_create)
_create_table_alias.hidden = True
cli.add_command(_create_table_alias, "create-table")


@cli.command("iam-policy", context_settings=CONTEXT)
@common_options
@click.option("--read-only", is_flag=True, help="Only what status, list and audit need.")
@click.option(
    "--account",
    default="*",
    show_default=True,
    callback=lambda _ctx, _param, value: _account_id(value),
    help="Account id in the table ARN (12 digits).",
)
def iam_policy_command(common: Common, read_only: bool, account: str) -> None:
    """Print the least-privilege IAM policy for the lock table.

    The table ARN has the region --region (or AWS_REGION) names, else *. The
    "AwsflockTableSetup" statement is only for whoever runs table-create.
    """
    kind = common.kind
    if "iam-policy" not in kind.commands:
        # The rules of a PostgreSQL or Redis store are not IAM's: printing DynamoDB's would
        # send the operator to grant the wrong thing.
        raise errors.UsageError(
            f"iam-policy is for the DynamoDB store, and the store is a {kind.title}",
            hint="for PostgreSQL or Redis, run `awsflock grants`",
        )
    policy = kind.command("iam-policy")
    region = common.region or "*"
    click.echo(policy(common.tablename, read_only=read_only, region=region, account=account))


def _account_id(value: str) -> str:
    """An AWS account id as an ARN has it: 12 digits (leading zeros kept), or * for any."""
    text = value.strip()
    if text == "*" or (len(text) == 12 and text.isascii() and text.isdigit()):
        return text
    raise click.BadParameter(
        f"{value!r} is not an AWS account id: it has 12 digits, e.g. 123456789012 (or * for any)"
    )


@cli.command("grants", context_settings=CONTEXT)
@common_options
@click.option(
    "--role",
    default="awsflock",
    show_default=True,
    help="The PostgreSQL role, or Redis user, to grant to.",
)
@click.option("--read-only", is_flag=True, help="Only what status, list and audit need.")
def grants_command(common: Common, role: str, read_only: bool) -> None:
    """Print what a database role needs for the lock table: GRANT statements for PostgreSQL,
    ACL SETUSER rules for Redis.

    The counterpart of iam-policy: run them as the table's owner (PostgreSQL: whoever ran
    table-create, e.g. `awsflock grants --role app | psql "$URL"`) or an admin user (Redis,
    with redis-cli).
    """
    kind = common.kind
    if "grants" not in kind.commands:
        # As every command: no --store is the default store, DynamoDB, whose rules are IAM's.
        said = (
            f"--store names a {kind.title}"
            if common.named != kinds.default()
            else f"no --store names one (the store is {kind.title.split()[0]})"
        )
        raise errors.UsageError(
            f"grants is for the PostgreSQL and Redis stores, and {said}",
            hint="for DynamoDB, run `awsflock iam-policy`; for PostgreSQL or Redis, name the "
            "store with --store URL or AWSFLOCK_STORE",
        )
    click.echo(kind.command("grants")(common.tablename, role, read_only=read_only))


@cli.command("dev-server", context_settings=CONTEXT)
@common_options
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="Port on 127.0.0.1 (0 picks a free one).",
)
def dev_server(common: Common, port: int) -> None:
    """Run a local DynamoDB-compatible endpoint (in memory) until Ctrl-C.

    Prints the line to export so that awsflock in other shells uses it; commands
    pointed at a loopback endpoint need no AWS credentials or region. Needs the
    'local' extra: pip install 'awsflock[local]'. -q prints only the export line;
    the options that name a store or an endpoint to use do not apply to it.
    """
    quiet = common.quiet
    serve = kinds.with_command("dev-server").command("dev-server")

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
