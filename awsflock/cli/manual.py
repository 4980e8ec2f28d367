"""The reference manual, made from the click definitions so that it cannot drift from them:
Markdown for the documentation site (``docs/hooks.py`` puts it into the reference pages) and
roff for the ``awsflock(1)`` man page (``man/awsflock.1``, installed with the package).

    python -m awsflock.cli.manual man > man/awsflock.1     # the man page
    python -m awsflock.cli.manual markdown                 # the commands' reference
    python -m awsflock.cli.manual environment              # the environment variables

Only what ``--help`` shows is documented: hidden commands (``keep-alive``, the renewer's
entry point; ``create-table``, 0.2.0's spelling) and hidden options are left out.
"""

from __future__ import annotations

import inspect
import re
import sys
from dataclasses import dataclass, field

import click

#: The sections of the man page after the commands, in Markdown-free words.
EXIT_STATUS = [
    ("0", "done"),
    ("1", "operational error: the store, the network, credentials, region, missing table"),
    ("2", "usage error: bad option, duration, LOCK_ID or LEASE_ID"),
    ("3", "lock held by another (acquire) / lease not held (renew, release)"),
    ("130", "interrupted"),
]
RUN_EXIT_STATUS = [
    ("the status of CMD", "CMD ran and exited with it"),
    ("75", "lock not acquired (-E/--conflict-exit-code overrides)"),
    ("124", "the lease was lost while CMD ran, and CMD was stopped"),
    ("125", "awsflock itself failed"),
    ("126, 127", "CMD not executable, not found"),
    ("128+N", "CMD was killed by signal N"),
]
#: Variables no option reads: of the stores...
STORE_ENVIRONMENT = [
    ("AWSFLOCK_REDIS_PASSWORD", "the Redis store's password, where the store URL has none"),
    ("PGPASSWORD", "the PostgreSQL store's password, and the rest of libpq's PG* variables"),
    ("AWS_PROFILE", "the AWS profile, and the rest of the AWS SDK's variables"),
    # ... and of the metrics (awsflock.cli.telemetry; needs the otel extra)
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "export metrics over OTLP/HTTP there (and the other OTEL_*)"),
    ("AWSFLOCK_METRICS_TEXTFILE", "add each command's metrics to this Prometheus textfile"),
    ("AWSFLOCK_METRICS_LOCK", "the metrics' lock attribute: full, none, or up to separator N"),
]
#: ... and what ``run`` gives its command.
COMMAND_ENVIRONMENT = [
    ("AWSFLOCK_HELD", "1 in the environment of a command under run"),
    ("AWSFLOCK_LOCK_ID", "the lock the command runs under"),
    ("AWSFLOCK_OWNER", "who holds it"),
    ("AWSFLOCK_FENCING_TOKEN", "the lease's fencing token (never the LEASE_ID)"),
    ("AWSFLOCK_PREVIOUS", "how the lease before ended: first, released, expired or forced"),
    ("AWSFLOCK_SLOT", "the pool slot held, with --slots"),
]


@dataclass
class Option:
    """One option as --help shows it."""

    names: str  # e.g. "-n, --no-wait" or "--wait-time DURATION"
    help: str
    envvars: list[str] = field(default_factory=list)


@dataclass
class Command:
    """One visible command: its usage line, its help in paragraphs, its options."""

    name: str
    usage: str
    summary: str
    paragraphs: list[Paragraph]
    options: list[Option]


@dataclass
class Paragraph:
    """Text to wrap, or (click's ``\\b``) lines to keep as they are."""

    lines: list[str]
    verbatim: bool


def _paragraphs(text: str | None) -> list[Paragraph]:
    out = []
    for block in re.split(r"\n\s*\n", inspect.cleandoc(text or "")):
        if not block.strip():
            continue
        if block.startswith("\b"):
            lines = [line for line in block[1:].split("\n") if line.strip()]
            out.append(Paragraph(inspect.cleandoc("\n".join(lines)).split("\n"), True))
        else:
            out.append(Paragraph([" ".join(block.split())], False))
    return out


def _envvars(param: click.Parameter) -> list[str]:
    envvar = param.envvar
    if not envvar:
        return []
    return [envvar] if isinstance(envvar, str) else list(envvar)


def _options(command: click.Command, ctx: click.Context) -> list[Option]:
    out = []
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option):
            continue  # arguments are named in the usage line and explained in the help
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        out.append(Option(names, " ".join(help_text.split()), _envvars(param)))
    return out


def _usage(command: click.Command, ctx: click.Context) -> str:
    formatter = ctx.make_formatter()
    formatter.width = 10_000
    command.format_usage(ctx, formatter)
    return " ".join(formatter.getvalue().split()).removeprefix("Usage: ")


def root() -> click.Group:
    from awsflock.cli import cli

    return cli


def commands(group: click.Group | None = None) -> list[Command]:
    """The group itself (first), then every visible command, by name."""
    group = group or root()
    # With each command's context_settings (help_option_names: -h), as click makes them.
    top = click.Context(group, info_name="awsflock", **group.context_settings)
    out = [
        Command(
            "awsflock",
            _usage(group, top),
            group.get_short_help_str(limit=200),
            _paragraphs(group.help),
            _options(group, top),
        )
    ]
    for name in group.list_commands(top):
        command = group.get_command(top, name)
        if command is None or command.hidden:
            continue
        ctx = click.Context(command, info_name=name, parent=top, **command.context_settings)
        out.append(
            Command(
                name,
                _usage(command, ctx),
                command.get_short_help_str(limit=200),
                _paragraphs(command.help),
                _options(command, ctx),
            )
        )
    return out


def common(entries: list[Command]) -> list[Option]:
    """The options every command that names a store takes (--store and its company), in the
    order they come: documented once rather than under every command."""
    stores = [c for c in entries if {"--store", "--debug"} <= _flags(c)]
    if not stores:
        return []
    shared = set.intersection(*({o.names for o in c.options} for c in stores))
    return [o for o in stores[0].options if o.names in shared and "--help" not in o.names]


def _flags(command: Command) -> set[str]:
    return {o.names.split()[0].rstrip(",") for o in command.options} | {
        o.names.split(", ")[-1].split()[0] for o in command.options
    }


def takes_common(command: Command, shared: list[Option]) -> bool:
    return bool(shared) and {o.names for o in shared} <= {o.names for o in command.options}


def own_options(command: Command, shared: list[Option]) -> list[Option]:
    """The command's options but the common ones (all of them, if it does not take those)."""
    if not takes_common(command, shared):
        return command.options
    names = {o.names for o in shared}
    return [o for o in command.options if o.names not in names]


def environment(group: click.Group | None = None) -> list[tuple[str, list[str], str]]:
    """(variable, the options it sets, one option's help) for every variable an option reads,
    in the order they first appear."""
    seen: dict[str, tuple[list[str], str]] = {}
    for command in commands(group):
        for option in command.options:
            flag = option.names.split()[0].rstrip(",")
            for var in option.envvars:
                flags = seen.setdefault(var, ([], option.help))[0]
                if flag not in flags:
                    flags.append(flag)
    return [(var, flags, help_text) for var, (flags, help_text) in seen.items()]


# Markdown -------------------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _md_paragraphs(paragraphs: list[Paragraph]) -> list[str]:
    out = []
    for paragraph in paragraphs:
        if paragraph.verbatim:
            out += ["```text", *paragraph.lines, "```", ""]
        else:
            out += [_md_escape(paragraph.lines[0]).replace("*", "\\*"), ""]
    return out


def _md_options(options: list[Option]) -> list[str]:
    out = ["| option | environment | meaning |", "|---|---|---|"]
    for option in options:
        env = ", ".join(f"`{var}`" for var in option.envvars)
        out.append(f"| `{option.names}` | {env} | {_md_escape(option.help)} |")
    return [*out, ""]


def markdown(group: click.Group | None = None) -> str:
    """The commands' reference: the options the store commands share, then a section per
    command with its usage, help and own options."""
    entries = commands(group)
    shared = common(entries)
    out: list[str] = []
    for command in entries:
        title = "awsflock" if command.name == "awsflock" else f"awsflock {command.name}"
        out += [f"## {title}", "", "```text", command.usage, "```", ""]
        out += _md_paragraphs(command.paragraphs)
        if command.name == "awsflock":
            out += _md_options(command.options)
            out += ["### Options every command takes", ""]
            out += [
                "Every command that reaches a store takes these, after the command's name "
                "(the same options and defaults everywhere):",
                "",
                *_md_options(shared),
            ]
            continue
        own = own_options(command, shared)
        if takes_common(command, shared):
            out += [
                "Takes [the options every command takes](#options-every-command-takes), and:",
                "",
            ]
        if own:
            out += _md_options(own)
    return "\n".join(out).rstrip() + "\n"


def environment_markdown(group: click.Group | None = None) -> str:
    out = ["| variable | sets | meaning |", "|---|---|---|"]
    for var, flags, help_text in environment(group):
        sets = ", ".join(f"`{flag}`" for flag in flags)
        out.append(f"| `{var}` | {sets} | {_md_escape(help_text)} |")
    return "\n".join(out) + "\n"


# roff -----------------------------------------------------------------------------------------


def _roff_escape(text: str) -> str:
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = re.sub(r"`([^`]*)`", r"\\fB\1\\fR", text)
    return text


def _roff_line(text: str) -> str:
    """One line of text, safe at the start of a roff line (a leading . or ' is a request)."""
    text = _roff_escape(text)
    return "\\&" + text if text[:1] in (".", "'") else text


def _roff_paragraphs(paragraphs: list[Paragraph]) -> list[str]:
    out = []
    for paragraph in paragraphs:
        out.append(".PP")
        if paragraph.verbatim:
            out += [".nf", *(_roff_line(line) for line in paragraph.lines), ".fi"]
        else:
            out.append(_roff_line(paragraph.lines[0]))
    return out


def _roff_options(options: list[Option]) -> list[str]:
    out = []
    for option in options:
        out += [".TP", f"\\fB{_roff_escape(option.names)}\\fR", _roff_line(option.help)]
    return out


def roff(group: click.Group | None = None, version: str | None = None) -> str:
    """The man page ``awsflock(1)``, for ``man -l`` or a man directory."""
    if version is None:
        from importlib.metadata import version as installed

        version = installed("awsflock")
    entries = commands(group)
    top, subcommands = entries[0], entries[1:]
    out = [
        '.\\" Made by python -m awsflock.cli.manual man from the click definitions; do not edit.',
        f'.TH AWSFLOCK 1 "" "awsflock {version}" "User Commands"',
        ".SH NAME",
        "awsflock \\- " + _roff_escape(top.summary.rstrip(".")),
        ".SH SYNOPSIS",
    ]
    for command in subcommands:
        out += [".PP", f"\\fB{_roff_escape(command.usage)}\\fR"]
    out.append(".SH DESCRIPTION")
    out += _roff_paragraphs(top.paragraphs)
    shared = common(entries)
    out.append(".SH COMMANDS")
    for command in subcommands:
        out += [".SS " + _roff_escape(command.name), f"\\fB{_roff_escape(command.usage)}\\fR"]
        out += _roff_paragraphs(command.paragraphs)
        own = own_options(command, shared)
        if takes_common(command, shared):
            out += [".PP", "Takes the COMMON OPTIONS below, and:"]
        out += _roff_options(own)
    out += [".SH COMMON OPTIONS", ".PP", "Every command that reaches a store takes these:"]
    out += _roff_options(shared)
    out.append(".SH ENVIRONMENT")
    for var, flags, help_text in environment(group):
        out += [".TP", f"\\fB{var}\\fR", _roff_line(f"sets {', '.join(flags)}: {help_text}")]
    for var, meaning in STORE_ENVIRONMENT + COMMAND_ENVIRONMENT:
        out += [".TP", f"\\fB{var}\\fR", _roff_line(meaning)]
    out += [".SH EXIT STATUS"]
    for code, meaning in EXIT_STATUS:
        out += [".TP", f"\\fB{code}\\fR", _roff_line(meaning)]
    out += [".PP", "\\fBawsflock run\\fR keeps 1, 2 and 3 for the command's own statuses:"]
    for code, meaning in RUN_EXIT_STATUS:
        out += [".TP", f"\\fB{_roff_escape(code)}\\fR", _roff_line(meaning)]
    out += [
        ".SH SEE ALSO",
        "\\fBflock\\fR(1). The user guide, the design and the library's API are in the "
        "documentation site, made from docs/ in the source (\\fBmkdocs serve\\fR).",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    what = argv[0] if argv else ""
    if what == "man":
        sys.stdout.write(roff())
    elif what == "markdown":
        sys.stdout.write(markdown())
    elif what == "environment":
        sys.stdout.write(environment_markdown())
    else:
        print("usage: python -m awsflock.cli.manual man|markdown|environment", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
