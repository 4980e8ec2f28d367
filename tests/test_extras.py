"""The command a missing extra's message gives fits how awsflock was installed."""

from __future__ import annotations

import pytest

from awsflock import extras


@pytest.fixture
def only_postgres(monkeypatch):
    monkeypatch.setattr(extras, "installed", lambda extra: extra == "postgres")


def test_under_pip_the_missing_extra_alone_is_added(tmp_path, only_postgres):
    assert extras.install_command("redis", str(tmp_path)) == "pip install 'awsflock[redis]'"


def test_under_pipx_the_tool_is_reinstalled_with_every_extra_it_has(tmp_path, only_postgres):
    (tmp_path / "pipx_metadata.json").write_text("{}")
    assert (
        extras.install_command("redis", str(tmp_path))
        == "pipx install --force 'awsflock[postgres,redis]'"
    )


def test_under_uv_the_tool_is_reinstalled_with_every_extra_it_has(tmp_path, only_postgres):
    (tmp_path / "uv-receipt.toml").write_text("[tool]\n")
    assert (
        extras.install_command("otel", str(tmp_path)) == "uv tool install 'awsflock[otel,postgres]'"
    )


def test_a_missing_drivers_hint_says_what_it_installs(monkeypatch, tmp_path):
    monkeypatch.setattr(extras.sys, "prefix", str(tmp_path))
    assert extras.hint("postgres") == "pip install 'awsflock[postgres]' (psycopg 3)"


def test_every_extra_named_here_is_one_the_package_declares():
    from importlib.metadata import metadata

    declared = set(metadata("awsflock").get_all("Provides-Extra") or [])
    assert set(extras.EXTRAS) <= declared
