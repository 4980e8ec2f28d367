"""The chaos test in CI size, against each real server (see tests/chaos/harness.py)."""

from __future__ import annotations

import os

import pytest

from tests.chaos.harness import SERVER_NAMES, chaos_server, run_chaos

DURATION = float(os.environ.get("AWSFLOCK_CHAOS_SECONDS", "22"))


@pytest.mark.timeout(DURATION + 240)
@pytest.mark.parametrize("name", SERVER_NAMES)
def test_no_violation_under_faults_kills_and_pauses(name, tmp_path):
    server = chaos_server(name).start()
    try:
        outcome = run_chaos(server.url, server.port, name, tmp_path, duration=DURATION, workers=6)
    finally:
        server.stop()
    print(outcome.screen())
    s = outcome.summary
    assert outcome.violations == [], outcome.screen()
    # The run must actually have exercised what it claims to.
    assert s["writes_accepted"] >= 5, outcome.screen()
    assert s["kills"] >= 1 and s["pauses"] >= 1, outcome.screen()
    assert {"drop", "reset", "delay", "throttle"} <= set(s["faults"]), outcome.screen()
