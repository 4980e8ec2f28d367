"""stderr for the CLI: short text for people, one JSON object per line for machines.

The library only logs through named loggers (``awsflock.lease``, ``awsflock.heartbeat``, ...); this
module is where the CLI decides what reaches stderr. Lease ids appear only at debug level. The
CLI's own lines (errors, conflicts, progress) go through ``say``, so that under
``--log-format json`` every line awsflock writes to stderr is one JSON object with the same
fields as the events: ts, level, logger, event, ..., message.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

#: Fields a log record may carry (via ``extra=``) that the JSON format copies out.
EVENT_FIELDS = (
    "event",
    "lock_id",
    "owner",
    "fencing_token",
    "slot",
    "waited_s",
    "held_s",
    "attempts",
    "expires_in_s",
    "handoff_s",
    # the outcome (or a lost lease's reason) of the same name in awsflock.metrics
    "outcome",
    "reason",
    "actor",
    "error",
    # fair waiting: the place in line (1 = next), who is ahead, who holds it
    "position",
    "ahead",
    "holder",
    "waiting_in_line",
)
SECRET_FIELDS = ("lease_id",)


FORMATS = ("text", "json")
#: The format of every stderr line; set from the command line (``setup``), or before parsing.
_format = "text"
#: Whether ``setup`` has routed the loggers to stderr (else the library's NullHandler alone).
_routed = False


def set_format(fmt: str) -> None:
    """Choose text or JSON for the lines written from now on."""
    global _format
    _format = fmt if fmt in FORMATS else "text"


def current_format() -> str:
    return _format


def say(message: str, **fields: Any) -> None:
    """Write one line to stderr: ``awsflock: [label: ]message``, or one JSON object (the
    keywords are ``render``'s: level, event, label, logger, and fields for JSON)."""
    sys.stderr.write(render(message, **fields) + "\n")
    sys.stderr.flush()


def render(
    message: str,
    *,
    level: str = "info",
    event: str = "log",
    label: str = "",
    logger: str = "awsflock.cli",
    fmt: str | None = None,
    **fields: Any,
) -> str:
    """The line ``say`` writes, in format ``fmt`` (default: the current one), without its
    newline (for lines written elsewhere: the keep-alive renewer's to the script's stderr).

    ``fields`` (exit_code, error, lock_id, ...) appear in JSON only; None values are left out.
    """
    if (fmt or _format) == "json":
        data: dict[str, Any] = {
            "ts": round(time.time(), 3),
            "level": level,
            "logger": logger,
            "event": event,
        }
        data.update({k: v for k, v in fields.items() if v is not None})
        data["message"] = message
        return json.dumps(data, default=str)
    return "awsflock: " + (f"{label}: " if label else "") + message


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, event fields, message."""

    def __init__(self, show_secrets: bool = False) -> None:
        super().__init__()
        self.show_secrets = show_secrets

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        names = EVENT_FIELDS + (SECRET_FIELDS if self.show_secrets else ())
        for name in names:
            if hasattr(record, name):
                data[name] = getattr(record, name)
        data.setdefault("event", "log")
        data["message"] = record.getMessage()
        return json.dumps(data, sort_keys=False, default=str)


#: Shown by default, without a "warning:" prefix: what a wait says (awsflock.lock.waiting).
NOTICE = logging.INFO + 5


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        prefix = "awsflock: "
        if record.levelno >= logging.WARNING:
            prefix += record.levelname.lower() + ": "
        return prefix + record.getMessage()


def setup_unless_done() -> None:
    """The default routing, in the current format, if no command set up its own."""
    if not _routed:
        setup(fmt=_format)


def setup(verbose: int = 0, quiet: bool = False, fmt: str = "text") -> None:
    """Route the ``awsflock`` loggers to stderr at the level -v/-q ask for."""
    global _routed
    _routed = True
    if quiet:
        level = logging.ERROR
    elif verbose >= 2:
        level = logging.DEBUG
    elif verbose == 1 or fmt == "json":
        # Choosing JSON means wanting the events, which are logged at INFO.
        level = logging.INFO
    else:
        # NOTICE: what a waiter should see without -v (who holds it, its place in line).
        level = NOTICE
    logging.addLevelName(NOTICE, "NOTICE")
    set_format(fmt)
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(show_secrets=level <= logging.DEBUG))
        logging.Formatter.converter = time.gmtime
    else:
        handler.setFormatter(TextFormatter())
    # Python warnings (from libraries) would be printed as multi-line text: under JSON they
    # become events of the "py.warnings" logger like any other.
    logging.captureWarnings(fmt == "json")
    for name in ("awsflock", "py.warnings"):
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        if name == "awsflock" or fmt == "json":
            logger.addHandler(handler)
            logger.propagate = False
        else:
            logger.propagate = True
    logging.getLogger("awsflock").setLevel(level)
