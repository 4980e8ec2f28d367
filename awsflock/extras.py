"""awsflock's optional extras: which are installed, and the command that adds one to *this*
install — pip's, pipx's or uv's, as the environment awsflock runs in was made by.

pipx and ``uv tool`` keep each tool in an environment of its own and reinstall it whole, so
their command names every extra already there beside the one missing (else adding ``redis``
would drop ``postgres``); pip adds to what is there.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: extra -> (a module it installs, what it is, in messages)
EXTRAS = {
    "postgres": ("psycopg", "psycopg 3"),
    "redis": ("redis", "redis-py"),
    "local": ("moto", "moto's server"),
    "otel": ("opentelemetry.sdk", "the OpenTelemetry SDK"),
}


def installed(extra: str) -> bool:
    """Whether ``extra``'s driver can be imported (found, not imported)."""
    import importlib.util

    module = EXTRAS[extra][0]
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a dotted name whose parent is missing
        return False


def installer(prefix: str | None = None) -> str:
    """ "pipx", "uv" or "pip": what made the environment at ``prefix`` (this one by default),
    told by the file each leaves in it."""
    root = Path(sys.prefix if prefix is None else prefix)
    if (root / "pipx_metadata.json").is_file():
        return "pipx"
    if (root / "uv-receipt.toml").is_file():
        return "uv"
    return "pip"


def install_command(extra: str, prefix: str | None = None) -> str:
    """The command that adds ``extra`` to this install, e.g. ``pip install 'awsflock[redis]'``."""
    tool = installer(prefix)
    if tool == "pip":
        return f"pip install 'awsflock[{extra}]'"
    wanted = sorted({extra} | {name for name in EXTRAS if installed(name)})
    spec = f"'awsflock[{','.join(wanted)}]'"
    if tool == "pipx":
        return f"pipx install --force {spec}"
    return f"uv tool install {spec}"


def hint(extra: str) -> str:
    """A missing extra's fix, for an error's hint: the command and what it installs."""
    return f"{install_command(extra)} ({EXTRAS[extra][1]})"
