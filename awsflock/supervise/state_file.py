"""``run --state-file PATH``: the lock's state as a file CMD reads and writes.

At the grant the lock's state is written to PATH (empty where none was written), and CMD is
given its path as ``AWSFLOCK_STATE_FILE``. At each renewal the file is read back: a changed
file is written as the lock's state with that renewal (``heartbeat.StateSource``). Once CMD has
exited, and before the release, a file changed since is written once more. A script
checkpoints by writing the file; it writes a whole file at once (a temporary file renamed over
PATH), so that a renewal never reads half of one.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from typing import Any

from awsflock import errors
from awsflock.state import MAX_STATE

log = logging.getLogger("awsflock.runner")
#: How long the last write waits for a renewal in flight to land (seconds).
FINISH_WAIT = 10.0


class StateFile:
    """The file at ``path``, and the content last written as the lock's state."""

    def __init__(self, path: str) -> None:
        """UsageError if ``path`` is there but not a regular file (a symlink: its target).
        Found by review 10: as root, ``--state-file /dev/null`` replaced /dev/null with a
        regular file of mode 0600."""
        self.path = os.path.realpath(os.path.abspath(path))
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            found = None
        except OSError as exc:
            raise errors.UsageError(
                f"cannot use the state file {self.path}: {exc.strerror or exc}",
                hint="give --state-file a path awsflock can read and write",
            ) from None
        if found is not None and not stat.S_ISREG(found.st_mode):
            raise errors.UsageError(
                f"the state file {self.path} is not a regular file",
                hint="give --state-file the path of a regular file, or of none yet",
            )
        #: The mode a new file is given: the one there, else read and write for its owner.
        self.mode = stat.S_IMODE(found.st_mode) if found is not None else 0o600
        #: What the store holds as the state, as far as is known (None: not known, a write of
        #: it was sent and not answered: whatever the file holds is written again).
        self.written: bytes | None = b""
        self._said: set[str] = set()

    def seed(self, data: bytes | None) -> None:
        """Write the state read at the grant (None: none) to the file, whole."""
        self.written = data or b""
        folder = os.path.dirname(self.path)
        try:
            fd, temporary = tempfile.mkstemp(prefix=".awsflock-state-", dir=folder)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(self.written)
                os.chmod(temporary, self.mode)
                os.replace(temporary, self.path)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError as exc:
            raise errors.UsageError(
                f"cannot write the state file {self.path}: {exc.strerror or exc}",
                hint="give --state-file a path in a folder awsflock can write to",
            ) from None

    def read(self) -> bytes:
        """The file's content; UsageError if it cannot be read or is too big for a state."""
        try:
            with open(self.path, "rb") as found:
                data = found.read(MAX_STATE + 1)
        except OSError as exc:
            raise errors.UsageError(
                f"cannot read the state file {self.path}: {exc.strerror or exc}",
                hint="leave the file where it is (write a new one and rename it over it)",
            ) from None
        if len(data) > MAX_STATE:
            raise errors.UsageError(
                f"the state file {self.path} holds more than {MAX_STATE} bytes",
                hint="keep a pointer (a key, a path) to larger state in it, not the state",
            )
        return data

    def changed(self) -> bytes | None:
        """What the file holds if it changed since the last write (or whether that write went
        through is not known); None otherwise, or if it cannot be read now (said once per
        reason: the final write says it as an error). Once returned, the content is counted as
        not known to be stored until ``saved``: a write applied without an answer may have
        stored it, so the next write goes whatever the file then holds (found by review 10: a
        file set back to the content before an unanswered write was never written again)."""
        try:
            data = self.read()
        except errors.UsageError as exc:
            if exc.message not in self._said:
                self._said.add(exc.message)
                log.warning("%s; not written with this renewal", exc.one_line())
            return None
        if data == self.written:
            return None
        self.written = None
        return data

    def saved(self, data: bytes) -> None:
        self.written = data

    def finish(self, hold: Any) -> bool:
        """CMD has exited, the lease is held: write a file changed since the last write, once
        the renewals write no more. False (said) if it could not be written."""
        hold.state_source = None
        hold.idle.wait(FINISH_WAIT)  # a renewal that read the file before then has landed
        try:
            data = self.read()
            if data != self.written:
                self.written = None
                hold.save_state(data)
                self.saved(data)
        except errors.AwsflockError as exc:
            log.error(
                "the last state in %s was not written: %s", self.path, exc.one_line(),
                extra={"event": "state_not_written", "lock_id": hold.lock_id},
            )  # fmt: skip
            return False
        return True
