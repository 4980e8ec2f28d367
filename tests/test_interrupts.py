"""Ctrl-C (SIGINT, a KeyboardInterrupt) ends a command with one line and exit 130, as the
documented "interrupted by signal 2 ..." lines of a wait say it; never click's "Aborted!" after
an empty line. Here the KeyboardInterrupt comes where the signal handlers of the wait are not
in place yet: while the store's client is made."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from awsflock.cli import cli
from awsflock.cli.options import Common


@pytest.fixture
def ctrl_c_while_connecting(monkeypatch):
    def table(self: Common, owner: str | None = None) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Common, "table", table)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["acquire", "deploy"], " while waiting for 'deploy'; nothing is held"),
        (
            ["acquire", "deploy", "--fair", "--keep-alive"],
            " while waiting for 'deploy'; nothing is held",
        ),
        (["run", "deploy", "--", "true"], " while waiting; the command was not started"),
        (["status", "deploy"], ""),
    ],
)
def test_ctrl_c_is_one_line_and_exit_130(ctrl_c_while_connecting, args, said):
    result = CliRunner().invoke(cli, args)
    assert (result.exit_code, result.stdout) == (130, "")
    assert result.stderr == f"awsflock: warning: interrupted by signal 2{said}\n"


def test_ctrl_c_under_json_is_one_json_event(ctrl_c_while_connecting):
    result = CliRunner().invoke(cli, ["acquire", "deploy", "--log-format", "json"])
    assert result.exit_code == 130
    (line,) = result.stderr.splitlines()
    event = json.loads(line)
    assert (event["event"], event["level"], event["exit_code"]) == ("interrupted", "warning", 130)
    assert event["message"] == "interrupted by signal 2 while waiting for 'deploy'; nothing is held"
