"""Property-based tests: any lock name, duration or LEASE_ID gives a clean outcome."""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awsflock import errors
from awsflock.cli import cli
from awsflock.names import check_lease_id, check_lock_id, slot_of

PROPERTY = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# Text a shell could pass as one argument (no NUL; click and the OS would refuse it first).
ARG = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=60)


def invoke(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert "Traceback" not in result.stderr
    return result


@given(name=st.one_of(ARG, st.text(min_size=2000, max_size=2100)))
def test_check_lock_id_accepts_or_refuses_cleanly(name):
    try:
        assert check_lock_id(name) == name
    except errors.UsageError as exc:
        assert exc.exit_code == 2 and exc.hint


@given(lease_id=ARG)
def test_check_lease_id_accepts_only_uuid_forms(lease_id):
    try:
        normal = check_lease_id(lease_id)
    except errors.UsageError:
        return
    uuid.UUID(normal.split(".")[0])
    assert slot_of(normal) is None or 0 <= slot_of(normal) < 1000


@given(u=st.uuids(version=4), slot=st.one_of(st.none(), st.integers(0, 99)))
def test_every_lease_id_awsflock_makes_is_accepted(u, slot):
    text = str(u) if slot is None else f"{u}.{slot}"
    assert check_lease_id(text) == text and slot_of(text) == slot


@PROPERTY
@given(name=ARG)
def test_acquire_of_any_name_is_granted_busy_or_a_usage_error(moto, name):
    result = invoke("acquire", "--no-wait", "-q", "--", name)
    assert result.exit_code in (0, 2, 3), result.stderr
    if result.exit_code == 0:
        uuid.UUID(result.stdout.strip())
    else:
        assert result.stdout == ""


@PROPERTY
@given(lease_id=ARG)
def test_renew_with_any_lease_id_is_not_held_or_a_usage_error(moto, lease_id):
    result = invoke("renew", "some-lock", lease_id)
    assert result.exit_code in (2, 3), result.stderr
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1


@PROPERTY
@given(duration=ARG)
def test_any_lease_duration_is_used_or_refused_in_one_line(moto, duration):
    result = invoke("acquire", "dur-" + uuid.uuid4().hex, "--lease-duration", duration, "--no-wait")
    assert result.exit_code in (0, 2), result.stderr
    if result.exit_code == 2:
        assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("wait", ["0.5", "1s", "0"])
def test_small_waits_are_accepted(moto, wait):
    assert invoke("acquire", "w-" + wait, "--wait-time", wait).exit_code == 0
