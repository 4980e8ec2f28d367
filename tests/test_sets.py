"""A set's ids and the checks of its names (``awsflock.sets``)."""

from __future__ import annotations

import uuid

import pytest

from awsflock import errors, sets
from awsflock.names import check_lease_id


def test_a_set_id_is_a_uuid_of_version_8_and_passes_as_a_lease_id():
    ids = {sets.new_set_id() for _ in range(200)}
    assert len(ids) == 200
    for set_id in ids:
        assert uuid.UUID(set_id).version == 8 and uuid.UUID(set_id).variant == uuid.RFC_4122
        assert check_lease_id(set_id) == set_id and sets.is_set_id(set_id)
    assert not sets.is_set_id(str(uuid.uuid4())) and not sets.is_set_id("not-a-uuid")


def test_each_name_of_a_set_has_its_own_lease_id_derived_from_the_set_s():
    set_id, other = sets.new_set_id(), sets.new_set_id()
    a, b = sets.member_id(set_id, "a"), sets.member_id(set_id, "b")
    assert a == sets.member_id(set_id, "a")  # the holder derives it again from the LEASE_ID
    assert len({a, b, sets.member_id(other, "a"), set_id}) == 4
    for member in (a, b):
        assert uuid.UUID(member).version == 5 and check_lease_id(member) == member
        assert not sets.is_set_id(member)


def test_the_names_of_a_set_are_checked_with_the_fix_named():
    assert sets.check_names(["b", "a"]) == ("b", "a")
    with pytest.raises(errors.UsageError, match="'a' is named twice"):
        sets.check_names(["a", "b", "a"])
    with pytest.raises(errors.UsageError, match="33 locks named; at most 32"):
        sets.check_names([f"n{i}" for i in range(33)])
    with pytest.raises(errors.UsageError, match="LOCK_ID is empty"):
        sets.check_names(["a", ""])


def test_a_set_id_says_which_names_it_was_made_for_in_any_order():
    set_id = sets.new_set_id(["db", "net"])
    assert sets.names_fit(set_id, ["net", "db"]) and sets.names_fit(set_id, ["db", "net"])
    for other in (["db"], ["db", "net", "app"], ["db", "nett"], []):
        assert not sets.names_fit(set_id, other)
    assert sets.is_set_id(set_id) and uuid.UUID(set_id).version == 8
