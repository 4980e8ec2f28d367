"""How ``awsflock run`` tells its lock names from CMD (``RunCommand.split``): with ``--`` every
word before it that is not an option is a LOCK_ID; without, the word after the first LOCK_ID
starts CMD; with -c STRING every such word is a LOCK_ID. CMD's own words are never parsed."""

from __future__ import annotations

import pytest

from awsflock.cli.app import cli

RUN = cli.commands["run"]


@pytest.mark.parametrize(
    ("words", "ours", "command"),
    [
        (["deploy", "--", "terraform", "apply"], ["deploy"], ["terraform", "apply"]),
        (["deploy", "make", "deploy"], ["deploy"], ["make", "deploy"]),
        (["a", "b", "c", "--", "./deploy.sh"], ["a", "b", "c"], ["./deploy.sh"]),
        (["a", "-w", "5", "b", "--", "x"], ["a", "-w", "5", "b"], ["x"]),
        # -c after a second word is that command's own (a CMD may be `sh -c ...`)
        (["a", "b", "-c", "echo"], ["a"], ["b", "-c", "echo"]),
        (["-c", "make", "a", "b"], ["-c", "make", "a", "b"], []),
        (["-qc", "make", "a", "b"], ["-qc", "make", "a", "b"], []),
        # a value that holds a "c" is no -c (found by a review: -w10sec took the command)
        (["-w10sec", "lock", "echo", "hi"], ["-w10sec", "lock"], ["echo", "hi"]),
        # CMD's own -c and --, after a command word with no `--` before: CMD's
        (["lock", "sh", "-c", "echo hi"], ["lock"], ["sh", "-c", "echo hi"]),
        (["lock", "--", "git", "checkout", "--", "f"], ["lock"], ["git", "checkout", "--", "f"]),
    ],
)
def test_the_names_end_where_cmd_begins(words, ours, command):
    assert RUN.split(words) == (ours, command)  # type: ignore[attr-defined]


def test_the_usage_line_names_several_locks():
    from click.testing import CliRunner

    shown = CliRunner().invoke(cli, ["run", "--help"], prog_name="awsflock").output
    assert "Usage: awsflock run LOCK_ID... [OPTIONS] [--] CMD [ARGS]..." in shown


def test_a_second_lock_taken_for_cmd_is_named_in_the_one_line(tmp_path):
    # `run a b -c STRING` runs `b -c STRING` holding a (a CMD may be `sh -c ...`): where b is no
    # command, the one line says how to hold both. Nothing is sent: the command is checked
    # before the lock is asked for.
    from click.testing import CliRunner

    env = {"AWSFLOCK_ENDPOINT_URL": "http://127.0.0.1:9", "PATH": str(tmp_path)}
    result = CliRunner().invoke(cli, ["run", "a", "db-lock", "-c", "true"], env=env)
    assert result.exit_code == 127
    assert result.stderr.strip().splitlines() == [
        "awsflock: error: command not found: db-lock (if 'db-lock' is another lock to hold, "
        "end the lock names with --: awsflock run LOCK db-lock -- CMD)"
    ]


def test_a_command_read_as_a_second_lock_name_is_refused_before_anything_is_sent():
    # `run L ssh host -- ./restart.sh` holds L, ssh and host and runs ./restart.sh here: the
    # names end at `--`. A name that is a command on PATH is refused (found by a review).
    from click.testing import CliRunner

    env = {"AWSFLOCK_ENDPOINT_URL": "http://127.0.0.1:9"}
    result = CliRunner().invoke(cli, ["run", "deploy", "env", "--", "sh", "-c", "true"], env=env)
    assert result.exit_code == 125
    assert result.stderr.strip().splitlines() == [
        "awsflock: usage error: 'env' is a command, but here it is a lock name (the names end at "
        "--): to run it, put -- after the lock name: awsflock run deploy -- env ..."
    ]
    # The first name may be anything; so may every name with -c STRING (no CMD words there).
    assert RUN.split(["env", "-c", "true", "sh"]) == (["env", "-c", "true", "sh"], [])  # type: ignore[attr-defined]
