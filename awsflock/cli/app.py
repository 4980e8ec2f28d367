"""The ``awsflock`` group: every failure becomes one stderr line and an exit code, here
(as ``awsflock.cli.failures`` says it).

The commands live in the modules beside this one, one per group of commands; each parses, calls
the library, and prints. stdout carries results only (a LEASE_ID, JSON); all else is stderr.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from awsflock.cli import failures, logs, streams
from awsflock.cli.options import SHARED, STATE, before_command
from awsflock.cli.streams import emit, print_lease

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

#: The words the running command line was given (after the program's name).
ARGV: list[str] = []

#: ``ctx.meta`` key: what the running command says if Ctrl-C (a KeyboardInterrupt) ends it now,
#: after "interrupted by signal 2" (acquire and run: the wait; nothing is held yet).
INTERRUPTED = "awsflock.interrupted"


def if_interrupted(what: str) -> None:
    """Say ``what`` (e.g. " while waiting for 'x'; nothing is held") if Ctrl-C ends the
    command from now on ("" from when nothing more can be said)."""
    click.get_current_context().meta[INTERRUPTED] = what


class _Cli(click.Group):
    """The top-level group: every failure becomes one stderr line and an exit code, here."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The footer of ``awsflock --help``: the version (read only when help is shown)."""
        import awsflock

        formatter.write_paragraph()
        formatter.write_text(
            f"awsflock {awsflock.__version__}; `awsflock --version` also says which stores "
            "this install can use. Documentation: `man awsflock`, and docs/ in the source."
        )

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            raise failures.Interrupted("") from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise failures.Interrupted(ctx.meta.get(INTERRUPTED, "")) from None

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        argv = kwargs.get("args")
        argv = list(sys.argv[1:] if argv is None else argv)
        # Only awsflock's own --debug option (its callback) turns tracebacks on: a --debug in
        # run's command, after --, or as an option's value is not awsflock's.
        STATE["debug"] = False
        STATE["ran"] = False
        ARGV[:] = argv
        # Errors found while click parses come before the --log-format option is read: pick
        # the format from awsflock's own words now (the option's callback confirms it later).
        logs.set_format(self._early_log_format(argv))
        # `run` keeps 1, 2 and 3 for the command's own statuses: its own failures are 125.
        own = 125 if isinstance(self._command_of(argv)[1], RunCommand) else None
        sys.exit(failures.call(lambda: super(_Cli, self).main(*args, **kwargs), own))

    def _command_of(self, argv: list[str]) -> tuple[list[str], click.Command | None, list[str]]:
        """(the words before the command: shared options; the command; the words after it)."""
        takes_value = _options_taking_a_value(self)
        i = 0
        while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
            if argv[i] == "--":
                i += 1
                break
            i += 1 + _value_words(argv[i], takes_value)
        name = argv[i] if i < len(argv) else ""
        return argv[:i], self.commands.get(name), argv[i + 1 :]

    def _early_log_format(self, argv: list[str]) -> str:
        """--log-format as click will read it: the last one among awsflock's own words (not
        after --, not in run's command, not an option's value), else AWSFLOCK_LOG_FORMAT."""
        import os

        before, command, words = self._command_of(argv)
        if isinstance(command, RunCommand):
            words = command.split(words)[0]
        elif "--" in words:
            words = words[: words.index("--")]
        takes_value = _options_taking_a_value(command) if command is not None else set()
        found = _log_format_in(words, takes_value) or _log_format_in(
            before, _options_taking_a_value(self)
        )
        if found not in logs.FORMATS:  # none, or one click will refuse
            found = os.environ.get("AWSFLOCK_LOG_FORMAT", "")
        return found if found in logs.FORMATS else "text"

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """The command, refused if shared options came before one that takes none of them."""
        name, command, rest = super().resolve_command(ctx, args)
        on_line = click.core.ParameterSource.COMMANDLINE
        before = [
            param.opts[-1]
            for param in self.params
            if isinstance(param, click.Option) and param.hidden and param.name
            if ctx.get_parameter_source(param.name) == on_line
        ]
        if before and command is not None and not getattr(command.callback, SHARED, False):
            raise click.UsageError(
                f"{', '.join(before)} before '{name}', which takes none of the shared options: "
                f"give {name}'s own options after it",
                ctx,
            )
        return name, command, rest


def _options_taking_a_value(command: click.Command) -> set[str]:
    return {
        name
        for param in command.params
        if isinstance(param, click.Option) and not param.is_flag and not param.count
        for name in param.opts
    }


def _gives_shell(word: str, takes_value: set[str]) -> bool:
    """Whether ``word`` (an option) is or holds -c: alone, with its value (-cSTRING), or in a
    cluster of short options before any that takes a value (-qc, not -w10sec)."""
    if word.startswith("--"):
        return False
    for letter in word[1:]:
        if letter == "c":
            return True
        if f"-{letter}" in takes_value:
            return False  # the rest of the word is that option's value
    return False


def _value_words(word: str, takes_value: set[str]) -> int:
    """How many of the words after ``word`` (an option) are its value: 1 or 0 (a flag, a value
    given with =, or short options run together whose last takes none, as -qn; in -nw5 the
    value is in the word, in -nw it is the next word)."""
    if word in takes_value:
        return 1
    if word.startswith("--") or len(word) < 3:
        return 0
    for i, letter in enumerate(word[1:], start=1):
        if f"-{letter}" in takes_value:
            return 1 if i == len(word) - 1 else 0
    return 0


def _log_format_in(words: list[str], takes_value: set[str]) -> str:
    """The last --log-format among ``words`` (awsflock's options), or ""."""
    found = ""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--log-format" and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith("--log-format="):
            found = word.partition("=")[2]
        if word.startswith("-"):
            i += _value_words(word, takes_value)  # its value is not an option
        i += 1
    return found


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: click's first line, then which stores and extras this install has."""
    if not value or ctx.resilient_parsing:
        return
    import awsflock
    from awsflock import extras
    from awsflock.stores import kinds

    extra_words = [word for word in ARGV if word != "--version"]
    if extra_words:  # `awsflock --version acquire x` would otherwise ignore the command
        raise click.UsageError(
            f"--version takes nothing else, and was given {' '.join(extra_words)!r}: run "
            "`awsflock --version` alone",
            ctx,
        )
    click.echo(f"awsflock, version {awsflock.__version__}")
    for kind in kinds.KINDS:
        if kinds.installed(kind):
            state = f"installed ({kind.driver})"
        else:
            state = f"not installed: {extras.install_command(kind.extra or '')}"
        click.echo(f"  {kind.name} store: {state}")
    for extra, what in (("local", "dev-server"), ("otel", "metrics export")):
        said = "installed" if extras.installed(extra) else extras.install_command(extra)
        click.echo(f"  {what} ({extra} extra): {said}")
    ctx.exit()


@click.group(cls=_Cli, context_settings=CONTEXT, no_args_is_help=True)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_version,
    help="Show the version and which stores this install can use, and exit.",
)
@before_command
def cli(**_shared: Any) -> None:
    """flock(1) for machines that share nothing but an AWS account, a database or a Redis.

    Locks are lease records in one DynamoDB table (or a PostgreSQL table, or Redis keys:
    --store), taken and given back with conditional writes. `acquire` prints a LEASE_ID;
    `renew` and `release` take it; `run` holds a lock while a command runs.

    The options every command shares (--store, --tablename, --region, --profile,
    --endpoint-url, --skew, --request-timeout, -v, -q, --log-format, --debug) may
    come before the command too: `awsflock --tablename t acquire x` is
    `awsflock acquire x --tablename t`. Given in both places, they must agree.

    \b
    Exit codes: 0 done, 1 AWS/network/configuration error, 2 usage error,
    3 lock held by another / lease not held.

    \b
    Durations: '300', '300s', '15m', '3 minutes', '100hrs', '1 day', '2h30m'.
    """


class RunCommand(click.Command):
    """`run LOCK_ID... [OPTIONS] [--] CMD [ARGS]...`: awsflock's options may come before or
    after the names. With a `--`, every word before it that is not an option is a LOCK_ID and
    CMD follows it; without one, the word after the first LOCK_ID that is not an option starts
    CMD (with -c STRING, which leaves no CMD, every such word is a LOCK_ID). CMD's own options
    are never parsed by awsflock."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        head, tail = self.split(args)
        ctx.meta["awsflock.command"] = tail
        return super().parse_args(ctx, head)

    def split(self, args: list[str]) -> tuple[list[str], list[str]]:
        """(awsflock's own words, CMD and its arguments)."""
        takes_value = _options_taking_a_value(self)
        ended = "--" in args  # the names end at the first `--`
        positional = 0
        i = 0
        while i < len(args):
            word = args[i]
            if word == "--":
                return args[:i], args[i + 1 :]
            if word.startswith("-") and word != "-":
                ended = ended or _gives_shell(word, takes_value)
                i += _value_words(word, takes_value)  # its value
            else:
                positional += 1
                if positional == 2 and not ended:
                    return args[:i], args[i:]
            i += 1
        return args, []

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "LOCK_ID... [OPTIONS] [--] CMD [ARGS]...")


def main(argv: list[str] | None = None) -> None:
    """Console entry point. As a process's own (no ``argv``), it ends the process once the
    command is done without tearing the interpreter down (see ``streams.end``)."""
    if argv is not None:
        cli.main(args=argv, prog_name="awsflock")
        return
    from awsflock.cli import logs, telemetry

    telemetry.start()
    try:
        cli.main(prog_name="awsflock")
    except SystemExit as done:
        # What is said at the end (the metrics' warnings) reaches stderr even from a command
        # refused before it set up its logging: the library's loggers alone print nothing.
        logs.setup_unless_done()
        streams.end(done.code)


__all__ = ["CONTEXT", "RunCommand", "cli", "emit", "if_interrupted", "main", "print_lease"]
