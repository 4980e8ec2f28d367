"""``scripts/chaos``: the chaos run at a chosen size (see harness.py)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.chaos.harness import SERVER_NAMES, chaos_server, run_chaos


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/chaos", description=__doc__)
    parser.add_argument("--duration", type=float, default=35.0, help="seconds per server")
    parser.add_argument("--workers", type=int, default=6, help="contending processes (>= 6)")
    parser.add_argument("--server", choices=[*SERVER_NAMES, "all"], default="all")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--fault-rate", type=float, default=1.0, help="multiplies the fault probabilities"
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep logs in this folder")
    args = parser.parse_args()
    names = SERVER_NAMES if args.server == "all" else [args.server]
    failed = False
    for name in names:
        server = chaos_server(name).start()
        try:
            work = (args.keep / name) if args.keep else Path(tempfile.mkdtemp(prefix="chaos-"))
            outcome = run_chaos(
                server.url,
                server.port,
                name,
                work,
                duration=args.duration,
                workers=args.workers,
                seed=args.seed,
                fault_rate=args.fault_rate,
            )
        finally:
            server.stop()
        print(outcome.screen())
        failed = failed or bool(outcome.violations)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
