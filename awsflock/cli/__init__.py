"""The ``awsflock`` command line, a thin layer over the library.

``app`` holds the group and the one place where errors become exit codes; ``options`` the
options every command shares, ``lock_options`` those of the commands that take a lock;
``logs`` what reaches stderr, ``streams`` stdout and the process's end. Each other module is
one group of commands: ``locks`` (acquire, renew, release), ``kept`` (the keep-alive
renewer's), ``run``, ``inspect`` (status, list, audit), ``operators`` (force-release,
pool-resize), ``setup`` (table-create, iam-policy, dev-server).
"""

# Importing a command module adds its commands to the group.
from awsflock.cli import inspect, kept, locks, operators, run, setup  # noqa: F401
from awsflock.cli.app import cli, main

__all__ = ["cli", "main"]
