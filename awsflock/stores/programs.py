"""The step programs the network stores run on their servers, read from files of their own.

Each store that does a lock step in one server-side call keeps that program beside its Python,
in the server's own language: ``redis/steps.lua`` (and ``redis/audit.lua``) for Redis's Lua 5.1,
``postgresql/steps.sql``, ``postgresql/table.sql`` and ``postgresql/done.sql`` for PostgreSQL.
They ship in the wheel as package data and are read with ``importlib.resources``, so an
installed awsflock runs the very text that was checked (``tests/test_step_programs.py`` runs
every step of each on a real server, and the pre-commit hook ``step-programs`` runs that file).

What only the Python knows is filled in at load, explicitly and nowhere else: a program names
it with a placeholder ``{{NAME}}`` (capitals and ``_``), and ``load`` is given every placeholder
the file holds, no more and no fewer, each either an ``int`` (written in decimal) or an
``Identifier`` (written as one quoted SQL identifier, whatever characters it holds). Nothing
else is substituted: a brace, a ``$`` or a ``%`` in a program is the server's.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Union

#: A placeholder in a program's text: ``{{NAME}}``.
PLACEHOLDER = re.compile(r"\{\{([A-Z][A-Z0-9_]*)\}\}")


class Identifier(str):
    """A name to write into a program as one quoted SQL identifier (``"a""b"`` for ``a"b``).

    It may not hold a NUL (no identifier can) or a ``'``: so that the quoted name may also
    stand inside a string literal, as in ``'{{T}}'::regclass``."""

    def quoted(self) -> str:
        if "\0" in self or "'" in self:
            raise ValueError(f"{str(self)!r} cannot be written into a program: a NUL or a '")
        return '"' + self.replace('"', '""') + '"'


Value = Union[int, Identifier]


@functools.cache
def text(package: str, name: str) -> str:
    """The program ``name`` of ``package`` as shipped, placeholders and all."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def placeholders(program: str) -> set[str]:
    """The names of the placeholders in ``program``."""
    return set(PLACEHOLDER.findall(program))


def load(package: str, name: str, **values: Value) -> str:
    """The program ``name`` of ``package`` with its placeholders filled in from ``values``.

    A placeholder without a value, a value without its placeholder, or a value that is neither
    an ``int`` nor an ``Identifier`` is a programming error (ValueError, TypeError)."""
    program = text(package, name)
    wanted = placeholders(program)
    if wanted != set(values):
        missing, unused = sorted(wanted - set(values)), sorted(set(values) - wanted)
        raise ValueError(f"{package}/{name}: no value for {missing}; no placeholder for {unused}")
    return PLACEHOLDER.sub(lambda m: _written(m.group(1), values[m.group(1)]), program)


def _written(name: str, value: Value) -> str:
    if isinstance(value, Identifier):
        return value.quoted()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    raise TypeError(f"{{{{{name}}}}}: an int or an Identifier, not {type(value).__name__}")
