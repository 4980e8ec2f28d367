"""The store registry (``awsflock.stores.kinds``): every kind is complete, URLs name the
right one, and what a kind declares agrees with its stores."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from awsflock import errors
from awsflock.protocol import LockStore
from awsflock.stores import kinds


@pytest.mark.parametrize("kind", kinds.ALL, ids=lambda k: k.name)
def test_every_kind_can_parse_open_and_run_its_commands(kind):
    hooks = kind.hooks()
    assert callable(hooks.parse) and callable(hooks.open)
    assert set(hooks.COMMANDS) == set(kind.commands)
    for command in kind.commands:
        assert callable(kind.command(command)), command
    assert set(kind.location) <= set(kinds.LOCATION_OPTIONS)
    for scheme in kind.schemes:
        assert kind.parse(f"{scheme}://x").kind == kind.name


#: A URL of each kind, whose store opens without connecting.
URLS = {
    "dynamodb": "dynamodb://t?region=eu-west-1",
    "postgresql": "postgresql://h/db",
    "redis": "redis://h:6379/0",
    "memory": "memory://",
}


def _open(kind: kinds.Kind, **extra: object) -> LockStore:
    named = kinds.parse(URLS[kind.name], in_process=True)
    return kind.open(named, kinds.Settings("t", 5.0, extra=extra))


@pytest.mark.parametrize("kind", kinds.ALL, ids=lambda k: k.name)
def test_a_store_is_of_the_kind_that_opened_it_and_has_its_capabilities(kind):
    # Opening makes no connection: a store connects on its first request.
    store = _open(kind)
    assert kinds.of(store) is kind
    assert store.skew_free == kind.skew_free == bool(kind.no_skew)
    assert kinds.transactions(store)  # until an endpoint answers that it has none
    assert store.table_name == "t"


@pytest.mark.parametrize("name", ["postgresql", "redis"])
def test_a_server_timed_store_in_its_callers_time_has_a_skew_window(name):
    store = _open(kinds.get(name), server_time=False)
    assert kinds.get(name).skew_free and not store.skew_free


def test_where_transactions_vary_the_store_says_whether_it_has_them():
    assert not kinds.transactions(_open(kinds.MEMORY, transactions=False))
    store = _open(kinds.get("dynamodb"))
    store._transactions = False  # as after dynalite answered that it has none
    assert not kinds.transactions(store)
    with pytest.raises(TypeError, match="must say whether it has transactions"):
        kinds.transactions(SimpleNamespace(kind="memory"))  # type: ignore[arg-type]


def test_a_kind_whose_module_is_no_kind_module_is_refused():
    kind = dataclasses.replace(kinds.MEMORY, module="awsflock.text")
    with pytest.raises(TypeError, match=r"awsflock\.text is not a KindModule"):
        kind.hooks()


def test_memory_urls_name_the_in_memory_store_for_the_library_only():
    assert kinds.MEMORY in kinds.ALL and kinds.MEMORY not in kinds.KINDS
    assert "memory" not in kinds.forms()  # the CLI's help names the shared stores only
    with pytest.raises(errors.UsageError, match="memory:// is the in-memory store, for the lib"):
        kinds.parse("memory://t")
    named = kinds.parse("memory://t?table=locks", in_process=True)
    assert (named.kind, named.table, dict(named.settings)) == ("memory", "locks", {"name": "t"})
    assert kinds.parse("MEMORY://", in_process=True).settings == {}


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
