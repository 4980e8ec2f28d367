"""Repros from adversarial reviews, each a violation once found and fixed, kept as regression
tests (the first: issue 40's asyncio, renewer and election review). Some wait in real time or
start a server, so all are left out of the fast tier (``slow``); the full run has them."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slow)
