"""How the ``awsflock`` group ends: every exception a command raises becomes an exit code and
one line on stderr (or one JSON object under --log-format json), naming the problem and the
fix; a traceback only under --debug."""

from __future__ import annotations

import signal
from typing import Any

import click

from awsflock import errors
from awsflock.cli import logs
from awsflock.cli.options import STATE
from awsflock.cli.streams import stdout_nowhere, stdout_unread


class Interrupted(Exception):
    """A KeyboardInterrupt carried past click, which would turn it into "Aborted!" after an
    empty line (not one line, and not JSON under --log-format json)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def call(call: Any, own_failure: int | None = None) -> int:
    """Run the CLI; map every exception to an exit code and one stderr line."""
    fail = _Fail(own_failure)
    try:
        result = call()
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except Interrupted as exc:
        return fail.interrupted(exc.what)
    except click.exceptions.Abort:
        return fail(130, "aborted", "Abort", label="")
    except click.UsageError as exc:
        return _usage_error(exc, fail)
    except click.ClickException as exc:
        return fail(exc.exit_code, exc.format_message(), type(exc).__name__)
    except errors.AwsflockError as exc:
        return _awsflock_error(exc, fail)
    except KeyboardInterrupt:
        return fail.interrupted("")
    except BrokenPipeError:
        return own_failure if own_failure is not None and not STATE.get("ran") else 1
    except SystemExit as exc:
        # click ends with exit(1) when a write to stdout finds its reader gone. With
        # `awsflock list | head -1` the reader has what it wanted: that is no failure.
        if exc.code == 1 and own_failure is None and stdout_unread():
            stdout_nowhere()
            return 0
        raise
    except Exception as exc:
        return _internal_error(exc, fail)
    return result if isinstance(result, int) else 0


class _Fail:
    """Say a failure (one stderr line, or a JSON object) and give its exit code. ``run``'s
    own failures before its command ran exit ``own_failure`` instead of 1, 2 or 3."""

    def __init__(self, own_failure: int | None) -> None:
        self.own_failure = own_failure

    def __call__(
        self, code: int, message: str, error: str, label: str = "error", **extra: Any
    ) -> int:
        if self.own_failure is not None and code in (1, 2, 3) and not STATE.get("ran"):
            code = self.own_failure
        fields = {"level": "error", "event": "error", **extra}
        logs.say(message, label=label, exit_code=code, error=error, **fields)
        return code

    def interrupted(self, what: str) -> int:
        # As a signal that ends a wait is said (see the acquire and run commands): SIGINT is 2.
        return self(
            128 + signal.SIGINT,
            f"interrupted by signal {int(signal.SIGINT)}{what}",
            "KeyboardInterrupt",
            label="warning",
            level="warning",
            event="interrupted",
        )


def _usage_error(exc: click.UsageError, fail: _Fail) -> int:
    """A usage error click found: one line, naming the problem and where the fix is
    documented (a bare `awsflock` gets click's help hint as it is, in text)."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: bare `awsflock`
        if logs.current_format() == "text":
            click.echo(exc.format_message(), err=True)
            return exc.exit_code
        return fail(exc.exit_code, "no command given (see 'awsflock --help')", "UsageError")
    where = exc.ctx.command_path if exc.ctx is not None else "awsflock"
    message = " ".join(exc.format_message().split())
    return fail(
        exc.exit_code,
        f"{message} (see '{where} --help')",
        type(exc).__name__,
        label="usage error",
    )


def _awsflock_error(exc: errors.AwsflockError, fail: _Fail) -> int:
    """One of awsflock's own errors: its line, labelled by its exit code (and its traceback
    under --debug: printed in text, a field in JSON)."""
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


def _internal_error(exc: Exception, fail: _Fail) -> int:
    """An exception awsflock did not expect: one line, or a traceback under --debug."""
    trace = None
    if STATE["debug"]:
        if logs.current_format() == "text":
            raise exc
        import traceback

        trace = traceback.format_exc()
    return fail(
        1,
        f"{type(exc).__name__}: {exc} (run again with --debug for details, and please report it)",
        type(exc).__name__,
        label="internal error",
        traceback=trace,
    )
