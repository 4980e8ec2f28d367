"""How a mutant puts a bug back: attributes replaced for the length of a run, then restored."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def patched(*changes: tuple[Any, str, Any]) -> Iterator[None]:
    """Each ``(owner, name, value)`` set while inside, and put back after (in reverse)."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in changes]
    try:
        for owner, name, value in changes:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
