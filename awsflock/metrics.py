"""What awsflock measures, through the OpenTelemetry metrics API: every store's steps and every
lease's life, recorded here and nowhere else, so the names, units and attributes are one list.

Recording costs a dictionary look-up until OpenTelemetry is in use: the API is never imported
here. It is in use once ``use`` gave a meter provider, or once something imported
``opentelemetry.metrics`` and set a global meter provider that keeps what it is given (an
application that set up its own SDK; awsflock's CLI when ``OTEL_*`` variables ask for export,
``awsflock.cli.telemetry``). The API imported without one (redis-py 8 imports it whenever it is
installed) is not use: until a provider is set, the API's stand-in would drop every measurement,
and building them cost 7% of a Redis cycle's CPU. The instruments come from the global meter
provider (or the one given), made once, when it is first in use.

Attributes: ``lock`` (the lock's name, or as much of it as ``AWSFLOCK_METRICS_LOCK`` keeps, to
bound cardinality), ``store`` (the store's kind), ``outcome`` (the same names the JSON event
log uses), and where they apply ``reason`` and ``step``.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from dataclasses import dataclass
from typing import Any

#: How much of a lock's name the ``lock`` attribute keeps: ``full`` (the default), ``none``,
#: or a number N: the name up to its N-th separator (``/ : . -``), e.g. 1 keeps
#: ``deploy`` of ``deploy-prod-eu``.
LOCK_ENV = "AWSFLOCK_METRICS_LOCK"
_SEPARATORS = re.compile(r"[/:.\-]")

# Outcomes, as the event log names them.
GRANTED, BUSY, TIMED_OUT, ERROR, CANCELLED = "granted", "busy", "timed_out", "error", "cancelled"
OK, TRANSIENT, LOST = "ok", "transient", "lost"
RELEASED, NOT_HELD, FAILED, IN_DOUBT = "released", "not_held", "failed", "in_doubt"
# Why a lease was lost.
EXPIRED, FORCE_RELEASED, REFUSED = "expired", "force_released", "renewal_refused"
#: A hold that reached its max-hold (counted as ``awsflock.holds.capped``, not as a loss).
CAPPED = "capped"

#: Every instrument: name -> (kind, unit, description). The metrics reference lists the same.
INSTRUMENTS: dict[str, tuple[str, str, str]] = {
    "awsflock.acquisitions": ("counter", "{acquisition}", "Acquires ended, by outcome"),
    "awsflock.acquire.wait": ("histogram", "s", "Wait until the grant"),
    "awsflock.acquire.polls": ("counter", "{poll}", "Tries that found the lock held"),
    "awsflock.acquire.place": ("histogram", "{place}", "A fair waiter's place in line"),
    "awsflock.renewals": ("counter", "{renewal}", "Renewals, by outcome"),
    "awsflock.renew.margin": ("histogram", "s", "Lease left when a renewal succeeded"),
    "awsflock.releases": ("counter", "{release}", "Releases, by outcome"),
    "awsflock.hold.duration": ("histogram", "s", "How long a lease was held, to its release"),
    "awsflock.leases.lost": ("counter", "{lease}", "Leases lost by their holder, by reason"),
    "awsflock.leases.reclaimed": ("counter", "{lease}", "Expired leases taken over by a grant"),
    "awsflock.grants.after_unreleased": (
        "counter",
        "{grant}",
        "Grants whose lease before was not released by its holder (it ran out, or was forced)",
    ),
    "awsflock.force_releases": ("counter", "{lease}", "Leases ended by an operator"),
    "awsflock.fencing.rejections": ("counter", "{write}", "Writes refused for a stale token"),
    "awsflock.store.request.duration": ("histogram", "s", "One store call, retries included"),
    "awsflock.store.retries": ("counter", "{retry}", "Tries of a store call after its first"),
}


#: Histogram bucket bounds: a store call's milliseconds to seconds; a wait's or a hold's
#: seconds to hours; places in line.
_CALL = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_LONG = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 86400.0)
BUCKETS: dict[str, tuple[float, ...]] = {
    "awsflock.acquire.wait": _LONG,
    "awsflock.acquire.place": (1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0),
    "awsflock.renew.margin": _LONG,
    "awsflock.hold.duration": _LONG,
    "awsflock.store.request.duration": _CALL,
}


@dataclass
class _Instruments:
    by_name: dict[str, Any]


_made: _Instruments | None = None
_given: Any = None
_lock = threading.Lock()


def use(provider: Any) -> None:
    """Record into ``provider`` (an OpenTelemetry ``MeterProvider``) from now on; None: go back
    to the global one, once OpenTelemetry is in use."""
    global _made, _given
    with _lock:
        _given, _made = provider, None


#: The global meter providers of the OpenTelemetry API that keep nothing: its stand-in until an
#: SDK's provider is set (which then takes its place), and its no-op provider.
_STAND_INS = ("_ProxyMeterProvider", "NoOpMeterProvider")


def _instruments() -> _Instruments | None:
    global _made
    made = _made
    if made is not None:
        return made
    provider = _given
    if provider is None:
        api = sys.modules.get("opentelemetry.metrics")
        if api is None:
            return None
        provider = api.get_meter_provider()
        if type(provider).__name__ in _STAND_INS:
            return None
    with _lock:
        if _made is None:
            from importlib.metadata import version

            if _given is not None:  # given meanwhile
                provider = _given
            meter = provider.get_meter("awsflock", version("awsflock"))
            by_name: dict[str, Any] = {}
            for name, (kind, unit, description) in INSTRUMENTS.items():
                if kind == "counter":
                    made_one = meter.create_counter(name, unit=unit, description=description)
                else:
                    made_one = _histogram(meter, name, unit, description)
                by_name[name] = made_one
            _made = _Instruments(by_name)
        return _made


def _histogram(meter: Any, name: str, unit: str, description: str) -> Any:
    """A histogram with our buckets, where the API takes them (1.23 and later)."""
    try:
        return meter.create_histogram(
            name,
            unit=unit,
            description=description,
            explicit_bucket_boundaries_advisory=list(BUCKETS[name]),
        )
    except TypeError:
        return meter.create_histogram(name, unit=unit, description=description)


def store_name(store: Any) -> str:
    """The ``store`` attribute of ``store``: its kind's name (``LockStore.kind``)."""
    return str(store.kind)


def lock_attribute(lock_id: str) -> str | None:
    """The ``lock`` attribute of ``lock_id``, as ``AWSFLOCK_METRICS_LOCK`` says (None: none)."""
    return _lock_attribute(lock_id, os.environ.get(LOCK_ENV, "full"))


@functools.lru_cache(maxsize=4096)
def _lock_attribute(lock_id: str, setting: str) -> str | None:
    """``lock_attribute`` under the setting's text ``setting`` (remembered: a lock's name is
    cut on every recording, several times per acquire and release)."""
    keep, _ = _lock_setting_of(setting)
    if keep is None:
        return None
    cuts = [m.start() for m in _SEPARATORS.finditer(lock_id)]
    return lock_id if keep < 1 or keep > len(cuts) else lock_id[: cuts[keep - 1]]


def lock_setting_error() -> str:
    """What is wrong with ``AWSFLOCK_METRICS_LOCK`` ("" if nothing)."""
    return _lock_setting_of(os.environ.get(LOCK_ENV, "full"))[1]


def _lock_setting_of(setting: str) -> tuple[int | None, str]:
    """(how many parts of a name to keep: 0 all, None no attribute; what is wrong, or "")."""
    keep = setting.strip().lower()
    if keep in ("", "full"):
        return 0, ""
    if keep == "none":
        return None, ""
    if keep.isdigit() and int(keep) >= 1:
        return int(keep), ""
    return 0, (
        f"{LOCK_ENV}={keep}: use full, none or a number from 1 (how many parts of a lock's "
        "name to keep); keeping whole names"
    )


def record(
    name: str, value: float, lock_id: str | None, store: Any, **attributes: str | None
) -> None:
    """Add ``value`` to counter ``name``, or record it in histogram ``name``; ``store``: the
    store object (or its name)."""
    made = _instruments()
    if made is None:
        return
    kind = store if isinstance(store, str) else store_name(store)
    attrs = {"store": kind, **{k: v for k, v in attributes.items() if v is not None}}
    lock = None if lock_id is None else lock_attribute(lock_id)
    if lock is not None:
        attrs["lock"] = lock
    instrument = made.by_name[name]
    if INSTRUMENTS[name][0] == "counter":
        instrument.add(value, attrs)
    else:
        instrument.record(value, attrs)


def enabled() -> bool:
    """Whether recording goes anywhere (callers may skip work that only feeds a metric)."""
    return _instruments() is not None
