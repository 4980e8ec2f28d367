"""flock(1)'s habits: -n and -w, and the shared options before the command as well as after it
(`awsflock --tablename t acquire x` is `awsflock acquire x --tablename t`); given in both
places they must agree. run's CMD words are never awsflock's options."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
import pytest
from click.testing import CliRunner

from awsflock.cli import cli
from awsflock.cli.options import Common
from awsflock.lock.lease import LockTable
from awsflock.records import Identity
from awsflock.stores.memory import MemoryStore


class Seen:
    def __init__(self) -> None:
        self.commons: list[Common] = []
        self.acquires: list[dict[str, Any]] = []

    @property
    def common(self) -> Common:
        return self.commons[-1]


@pytest.fixture
def seen(monkeypatch) -> Seen:
    """Every command runs on one in-memory store; what the options said is kept."""
    store, seen = MemoryStore(), Seen()
    real_acquire = LockTable.acquire

    def table(self: Common, owner: str | None = None) -> LockTable:
        seen.commons.append(self)
        return LockTable(store=store, identity=Identity(owner=owner or "me", host="h", pid=1))

    def acquire(self: LockTable, lock_id: str, **kwargs: Any) -> Any:
        seen.acquires.append(kwargs)
        return real_acquire(self, lock_id, **kwargs)

    monkeypatch.setattr(Common, "table", table)
    monkeypatch.setattr(LockTable, "acquire", acquire)
    return seen


def awsflock(*args: str, **env: str) -> Any:
    return CliRunner().invoke(cli, list(args), env=env)


def test_n_and_w_are_no_wait_and_wait_time(seen):
    assert awsflock("acquire", "deploy").exit_code == 0
    busy = awsflock("acquire", "deploy", "-n")
    assert busy.exit_code == 3 and seen.acquires[-1]["wait"] == 0
    assert len(busy.stderr.splitlines()) == 1
    assert awsflock("acquire", "other", "-w", "90").exit_code == 0
    assert seen.acquires[-1]["wait"] == 90
    assert awsflock("acquire", "third", "-w2m").exit_code == 0
    assert seen.acquires[-1]["wait"] == 120
    ran = awsflock("run", "deploy", "-n", "--", sys.executable, "-c", "pass")
    assert ran.exit_code == 75 and seen.acquires[-1]["wait"] == 0


def test_run_never_takes_cmd_words_for_its_options(seen, tmp_path):
    out = tmp_path / "argv"
    code = f"import sys; open({str(out)!r}, 'w').write(repr(sys.argv[1:]))"
    for args in (
        ["run", "job", "-w", "5", "--", sys.executable, "-c", code, "-n", "-w", "1"],
        ["run", "job", "-qw", "5", sys.executable, "-c", code, "-n", "-w", "1"],
        ["--tablename", "t", "run", "job", sys.executable, "-c", code, "-n", "-w", "1"],
    ):
        result = awsflock(*args)
        assert result.exit_code == 0, (args, result.stderr)
        assert out.read_text() == "['-n', '-w', '1']"
        assert seen.acquires[-1]["wait"] == (5 if {"-w", "-qw"} & set(args[:4]) else 60)


@pytest.mark.parametrize(
    ("options", "field", "value"),
    [
        (["--tablename", "t1"], "tablename", "t1"),
        (["--region", "eu-west-1"], "region", "eu-west-1"),
        (["--profile", "ci"], "profile", "ci"),
        (["--endpoint-url", "http://127.0.0.1:8000"], "endpoint_url", "http://127.0.0.1:8000"),
        (["--skew", "2s"], "skew", 2.0),
        (["--request-timeout", "1s"], "request_timeout", 1.0),
        (["-vv"], "verbose", 2),
        (["-q"], "quiet", True),
        (["--log-format", "json"], "log_format", "json"),
        (["--store", "dynamodb://t2?region=us-west-2"], "tablename", "t2"),
    ],
)
def test_a_shared_option_before_the_command_is_as_one_after_it(seen, options, field, value):
    before = awsflock(*options, "status", "deploy", AWSFLOCK_TABLE="from-env")
    after = awsflock("status", "deploy", *options, AWSFLOCK_TABLE="from-env")
    assert before.exit_code == after.exit_code == 3  # deploy: not held
    first, second = seen.commons[-2:]
    assert getattr(first, field) == getattr(second, field) == value
    assert first.store_options() == second.store_options()  # what a keep-alive renewer gets


def test_verbose_counts_add_up_and_agreeing_values_may_be_given_twice(seen):
    result = awsflock("-v", "--tablename", "t", "status", "deploy", "-v", "--tablename", "t")
    assert result.exit_code == 3
    assert (seen.common.verbose, seen.common.tablename) == (2, "t")


def test_a_shared_option_given_twice_with_two_values_is_refused(seen):
    result = awsflock("--tablename", "a", "acquire", "deploy", "--tablename", "b")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "awsflock: usage error: --tablename is given before and after the command, and differs "
        "(a and b): give --tablename once\n"
    )
    assert not seen.commons  # refused before anything was done
    ran = awsflock("--region", "a", "run", "deploy", "--region", "b", "--", "true")
    assert ran.exit_code == 125 and "--region is given before and after" in ran.stderr


def test_options_before_the_command_count_as_the_command_line_against_a_store_url(seen):
    result = awsflock("--region", "eu-west-1", "status", "x", AWSFLOCK_STORE="postgresql://h/db")
    assert result.exit_code == 2
    assert "--region applies to DynamoDB, and AWSFLOCK_STORE names a PostgreSQL database" in (
        result.stderr
    )


def test_shared_options_before_a_command_that_takes_none_are_refused(seen, monkeypatch):
    # Every command takes them (SPEC 3): a command made without them, as a future one may be.
    @click.command("bare")
    def bare() -> None:
        click.echo("ran")

    monkeypatch.setitem(cli.commands, "bare", bare)
    result = awsflock("--tablename", "t", "bare")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(
        "awsflock: usage error: --tablename before 'bare', which takes none of the shared "
        "options: give bare's own options after it"
    )
    assert awsflock("bare").stdout == "ran\n"


@pytest.mark.parametrize(
    "command, where",
    [
        (["iam-policy"], ["--profile", "p", "--endpoint-url", "http://127.0.0.1:1"]),
        (["grants", "--store", "redis://h/"], []),  # --profile there: refused, as anywhere
    ],
)
def test_the_setup_commands_take_the_shared_options_before_and_after(
    command: list[str], where: list[str]
):
    # The SPEC audit: a wrapper passing -q --log-format json to every command failed on
    # iam-policy, which refused them (exit 2), as it refused --profile and --endpoint-url.
    for args in (
        ["-q", "--log-format", "json", *command],
        [*command, "-v", *where, "--log-format", "json", "--debug"],
        [*command, "--tablename", "locks"],
    ):
        result = awsflock(*args)
        assert result.exit_code == 0, (args, result.stderr)
        assert "locks" in result.stdout or "locks" not in args


def test_iam_policy_names_the_region_it_is_given_or_any(monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    assert "arn:aws:dynamodb:*:*:table/awsflock" in awsflock("iam-policy").stdout
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert "arn:aws:dynamodb:eu-west-1:*:table/awsflock" in awsflock("iam-policy").stdout
    given = awsflock("iam-policy", "--region", "us-east-2", "--store", "dynamodb://ops")
    assert "arn:aws:dynamodb:us-east-2:*:table/ops" in given.stdout


def test_log_format_before_the_command_makes_parse_errors_json(seen):
    result = awsflock("--log-format", "json", "--tablename", "t", "acquire")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert json.loads(line)["error"] == "MissingParameter"


def test_help_says_where_the_shared_options_go():
    text = CliRunner().invoke(cli, ["--help"]).stdout
    assert "may come before the command too" in " ".join(text.split())
    assert "--tablename TEXT" not in text  # listed once, in each command's own help
    acquire_help = CliRunner().invoke(cli, ["acquire", "--help"]).stdout
    assert "-n, --no-wait" in acquire_help and "-w, --wait-time DURATION" in acquire_help
