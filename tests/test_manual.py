"""The reference manual made from the click definitions (awsflock/cli/manual.py): every
option documented, the committed man page current and renderable, the docs' generated pages
complete, shell completion working; and the README short, its links resolving."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import click
import pytest

from awsflock.cli import cli, manual
from tests.docs import ROOT

MAN_PAGE = ROOT / "man" / "awsflock.1"


def undocumented(group: click.Group) -> list[str]:
    """Visible commands without help, and visible options without help text."""
    missing = []
    ctx = click.Context(group, info_name="awsflock")
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        if not (command.help or "").strip():
            missing.append(name)
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden and not param.help:
                missing.append(f"{name} {param.opts[0]}")
    return missing


def test_every_command_and_option_has_help_text():
    assert undocumented(cli) == []


def test_the_help_check_finds_an_option_without_help():
    @click.group()
    def group() -> None:
        """A group."""

    @group.command()
    @click.option("--documented", help="Says what it does.")
    @click.option("--bare")
    def thing(documented: str, bare: str) -> None:
        """A command."""

    @group.command()
    def silent() -> None:
        pass

    assert undocumented(group) == ["silent", "thing --bare"]


def test_the_committed_man_page_is_made_from_the_current_options():
    current = manual.roff()
    assert MAN_PAGE.read_text() == current, "man/awsflock.1 is out of date: run scripts/docs man"


def test_the_man_page_names_every_command_and_option():
    page = MAN_PAGE.read_text()
    for command in manual.commands()[1:]:
        assert f".SS {command.name.replace('-', chr(92) + '-')}" in page
        for option in command.options:
            flag = option.names.split()[0].rstrip(",")
            assert manual._roff_escape(flag) in page, (command.name, flag)


def test_man_renders_the_page_without_warnings():
    if not shutil.which("man"):
        # CI must check it; a contributor without man-db is told how to.
        assert not os.environ.get("CI"), "man-db is needed to check the man page"
        pytest.skip("man-db is needed to check the man page (apt-get install man-db)")
    result = subprocess.run(
        ["man", "--warnings", "-l", str(MAN_PAGE)],
        capture_output=True,
        text=True,
        env={**os.environ, "MANPAGER": "cat", "MANWIDTH": "80", "LANG": "C.UTF-8"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "acquire" in result.stdout and "EXIT STATUS" in result.stdout


def test_the_reference_page_lists_every_command_and_option():
    text = manual.markdown()
    for command in manual.commands()[1:]:
        assert f"## awsflock {command.name}\n" in text
    shared = {o.names for o in manual.common(manual.commands())}
    for command in manual.commands():
        for option in command.options:
            assert f"`{option.names}`" in text or option.names in shared, option.names
    for var, _flags, _help in manual.environment():
        assert f"`{var}`" in manual.environment_markdown()


def complete(shell: str, words: str, cword: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "_AWSFLOCK_COMPLETE": f"{shell}_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": cword,
    }
    return subprocess.run(
        [sys.executable, "-m", "awsflock"], capture_output=True, text=True, env=env, timeout=60
    )


def test_bash_completion_completes_commands_and_options():
    commands = complete("bash", "awsflock ac", "1")
    assert commands.returncode == 0 and commands.stdout.split() == ["plain,acquire"]
    options = complete("bash", "awsflock acquire --no", "2")
    assert "plain,--no-wait" in options.stdout.split()
    run_options = complete("bash", "awsflock run --fa", "2")
    assert "plain,--fair" in run_options.stdout.split()


def test_fish_completion_shows_help_with_each_option():
    result = complete("fish", "awsflock release --js", "--js")
    assert result.stdout.startswith("plain,--json\t")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_gets_its_completion_script(shell):
    result = subprocess.run(
        [sys.executable, "-m", "awsflock"],
        capture_output=True,
        text=True,
        env={**os.environ, "_AWSFLOCK_COMPLETE": f"{shell}_source"},
        timeout=60,
    )
    assert result.returncode == 0 and "_AWSFLOCK_COMPLETE" in result.stdout


def test_the_readme_is_short_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if re.match(r"[a-z]+:", target):
            continue  # an outside address
        assert (ROOT / target).exists(), target


def test_the_readme_gives_the_commands_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for command in ("scripts/try", "scripts/test"):
        assert f"$ {command}\n" in readme and command in ci
