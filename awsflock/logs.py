"""stderr logging for the CLI: short text for people, one JSON object per event for machines.

The library only logs through named loggers (``awsflock.lease``, ``awsflock.store``, ...); this
module is where the CLI decides what reaches stderr. Lease ids appear only at debug level.
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
    "reason",
    "actor",
    "error",
)
SECRET_FIELDS = ("lease_id",)


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


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        prefix = "awsflock: "
        if record.levelno >= logging.WARNING:
            prefix += record.levelname.lower() + ": "
        return prefix + record.getMessage()


def setup(verbose: int = 0, quiet: bool = False, fmt: str = "text") -> None:
    """Route the ``awsflock`` loggers to stderr at the level -v/-q ask for."""
    if quiet:
        level = logging.ERROR
    elif verbose >= 2:
        level = logging.DEBUG
    elif verbose == 1 or fmt == "json":
        # Choosing JSON means wanting the events, which are logged at INFO.
        level = logging.INFO
    else:
        level = logging.WARNING
    logger = logging.getLogger("awsflock")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(show_secrets=level <= logging.DEBUG))
        logging.Formatter.converter = time.gmtime
    else:
        handler.setFormatter(TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
