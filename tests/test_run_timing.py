"""`run`'s loss timing: the default --kill-after adapts to the lease, and whatever it is, the
command is dead before the lease ends (so before another host may take it), while renewal keeps
its chance every lease/3."""

from __future__ import annotations

import pytest

from awsflock import errors
from awsflock.lock.heartbeat import Hold
from awsflock.lock.renewal import POLICY

kill_timing = POLICY.kill_timing

# lease: (default kill-after, guard = how long before expiry the command is dead, margin)
TIMINGS = {
    1.0: (0.2, 0.1, 0.3),
    3.0: (0.6, 0.3, 0.9),
    15.0: (3.0, 1.0, 4.0),
    60.0: (10.0, 1.0, 11.0),
    7200.0: (10.0, 1.0, 11.0),
}


@pytest.mark.parametrize("lease", sorted(TIMINGS))
def test_default_kill_after_fits_every_lease(lease):
    kill_after, guard, margin = TIMINGS[lease]
    got_kill_after, got_margin = kill_timing(lease)
    assert got_kill_after == pytest.approx(kill_after)
    assert got_margin == pytest.approx(margin)
    # Loss is declared `margin` before expiry (TERM), KILL follows kill_after later: the
    # command is dead `guard` before the lease ends, before another host could take it.
    expires = lease
    term_at = expires - got_margin
    kill_at = term_at + got_kill_after
    assert kill_at == pytest.approx(expires - guard) and kill_at < expires
    # Renewal every lease/3 gets its chance before loss is declared.
    assert term_at > lease / 3
    # And the heartbeat accepts that margin for that lease.
    assert Hold(None, "x", lease=lease, margin=got_margin).margin == got_margin  # type: ignore[arg-type]


@pytest.mark.parametrize("lease", sorted(TIMINGS))
def test_an_explicit_kill_after_that_fits_is_kept(lease):
    kill_after = TIMINGS[lease][0] / 2
    assert kill_timing(lease, kill_after)[0] == kill_after


@pytest.mark.parametrize(
    "lease,kill_after,longest",
    [(1.0, 0.6, "0.5s"), (3.0, 10.0, "1.6s"), (15.0, 10.0, "8.9s"), (60.0, 1800.0, "38s")],
)
def test_an_explicit_kill_after_that_does_not_fit_is_refused_naming_the_longest(
    lease, kill_after, longest
):
    with pytest.raises(errors.UsageError) as refused:
        kill_timing(lease, kill_after)
    assert f"use at most {longest}" in refused.value.one_line()
    # ... and the longest it names does fit.
    kill_timing(lease, float(longest.rstrip("s")))


def test_a_negative_kill_after_is_refused():
    with pytest.raises(errors.UsageError, match="negative"):
        kill_timing(60.0, -1.0)
