"""The store registry (``awsflock.stores.kinds``): every kind is complete, URLs name the
right one, and what a kind declares agrees with its stores."""

from __future__ import annotations

import pytest

from awsflock import errors
from awsflock.stores import kinds


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda k: k.name)
def test_every_kind_can_parse_open_and_run_its_commands(kind):
    hooks = kind.hooks()
    assert callable(hooks.parse) and callable(hooks.open)
    for command in kind.commands:
        assert callable(kind.command(command)), command
    assert set(kind.location) <= set(kinds.LOCATION_OPTIONS)
    assert kind.parse(f"{kind.schemes[0]}://x").kind == kind.name


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda k: k.name)
def test_what_a_kind_declares_agrees_with_its_store(kind):
    # Opening makes no connection: a store connects on its first request.
    url = {
        "dynamodb": "dynamodb://t?region=eu-west-1",
        "postgresql": "postgresql://h/db",
        "redis": "redis://h:6379/0",
    }
    store = kind.open(kinds.parse(url[kind.name]), kinds.Settings("t", 5.0))
    assert store.skew_free == bool(kind.no_skew)
    assert store.table_name == "t"


def test_urls_name_their_kind_and_table():
    named = kinds.parse("dynamodb://locks?region=eu-west-1&endpoint_url=http://127.0.0.1:8000")
    assert (named.kind, named.table) == ("dynamodb", "locks")
    assert dict(named.settings) == {"region": "eu-west-1", "endpoint_url": "http://127.0.0.1:8000"}
    assert kinds.parse("dynamodb://").table is None
    for url in ("postgresql://u@h:5432/db?table=mine", "POSTGRES://u@h/db?table=mine"):
        named = kinds.parse(url)
        assert (named.kind, named.table, named.url) == ("postgresql", "mine", url)
    assert kinds.default().kind == kinds.DEFAULT.name == "dynamodb"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis2://h", "unknown store redis2://"),
        ("locks", "unknown store 'locks'"),
        ("dynamodb://t?colour=red", "unknown parameter 'colour'"),
        ("dynamodb://t/extra", "unknown path '/extra'"),
    ],
)
def test_bad_urls_are_usage_errors(url, says):
    with pytest.raises(errors.UsageError, match=says):
        kinds.parse(url)


#: Commands several kinds have, which the CLI runs for the kind --store names.
BY_STORE = {"grants": ["postgresql", "redis"]}


def test_each_command_belongs_to_one_kind_or_goes_by_the_store():
    owners: dict[str, list[str]] = {}
    for kind in kinds.KINDS:
        for name in kind.commands:
            owners.setdefault(name, []).append(kind.name)
    assert {name: owned for name, owned in owners.items() if len(owned) > 1} == BY_STORE
    assert kinds.with_command("iam-policy").name == "dynamodb"
