"""A trimmed copy of botocore's data for the DynamoDB client, so building it is quick.

botocore's own loader lists every service it knows (about 450 folders) to check a name, parses
the 1.2 MB ``endpoints.json`` for all services, and reads a service model full of documentation:
about 35 ms of every command's start-up. This room makes, once per installed botocore, a copy of
only what a DynamoDB client reads — the DynamoDB model (its documentation left out), its
endpoint rule set, and the shared files, with ``endpoints.json`` cut to DynamoDB — into the
user's cache, from botocore's own installed files (nothing vendored, so nothing drifts). The
services botocore's credential chain makes clients of (``CREDENTIAL_SERVICES``: STS for
assume-role and web identity, IAM Identity Center for SSO, sign-in for ``aws login``) are
copied the same way, so those credentials cost no more start-up than keys do.

The copy is written atomically: each file fsynced, then a manifest (each file's size and
CRC-32, and the botocore it was made from) written last, the folder fsynced and renamed into
place. It is checked when read (``Copy.load``): a missing or unreadable manifest, one from
another botocore, a missing file or one whose size or checksum differ mean a damaged copy,
which is rebuilt (a damaged folder in place is moved aside first); if that fails too, the file
is read from botocore's own data. Never fatal: a crash half-way through a host's first command
leaves at worst a folder that the next command replaces.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.session import Session

log = logging.getLogger("awsflock.store")

SERVICE = "dynamodb"
API_VERSION = "2012-08-10"
#: The services botocore's credential chain makes clients of (botocore/credentials.py and
#: tokens.py), copied too where the installed botocore has them. Any other service a client is
#: made for is served from botocore's whole data (see ``botosession``).
CREDENTIAL_SERVICES = ("sts", "sso", "sso-oidc", "signin")
#: The files of botocore's data folder a client reads whatever its service.
SHARED = ("endpoints", "partitions", "sdk-default-configuration", "_retry")
#: What a model keeps only for documentation (docstrings, help), never for a request.
DOC_KEYS = frozenset({"documentation", "documentationUrl"})
#: Written last: the copy's files with their sizes and checksums, and what it was made from.
MANIFEST = "manifest.json"
#: Leftovers of a build interrupted this long ago (a crash, a kill) are removed by the next.
STALE_SECONDS = 3600


def cache_root() -> Path:
    """``AWSFLOCK_CACHE_DIR``, else ``$XDG_CACHE_HOME/awsflock``, else ``~/.cache/awsflock``."""
    named = os.environ.get("AWSFLOCK_CACHE_DIR")
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "awsflock"


def use_trimmed(session: Session) -> Copy | None:
    """The trimmed copy for ``session`` (made now if missing or damaged), or None where the
    user has data of their own (``AWS_DATA_PATH``, ``data_path`` in the config,
    ``~/.aws/models``) or the copy cannot be had: botocore's normal loader is used then."""
    from botocore.loaders import Loader

    if session.get_config_variable("data_path") or os.path.isdir(
        Loader.CUSTOMER_DATA_PATH  # expanded by botocore when imported
    ):
        return None
    try:
        return Copy(Path(Loader.BUILTIN_DATA_PATH), cache_root())
    except (OSError, ValueError) as exc:  # a read-only home, a full disk: the normal loader
        log.debug("botocore's data not trimmed (%s); using all of it", exc)
        return None


class Copy:
    """The trimmed copy of the botocore data folder ``source`` under ``root``: made when
    missing, rebuilt when damaged, each file checked against the manifest when loaded."""

    def __init__(self, source: Path, root: Path) -> None:
        self.source = source
        self.fingerprint = _fingerprint(source)
        self.folder = root / f"botocore-{self.fingerprint}"
        self.files: dict[str, tuple[int, int]] = {}
        #: Each service in the copy: its API versions, and the files (``service-2``...) of each.
        self.services: dict[str, dict[str, set[str]]] = {}
        found = read_manifest(self.folder, self.fingerprint)
        if found is None:
            self.rebuild()
        else:
            self._use(found)

    def rebuild(self) -> None:
        """Write the copy anew and put it in place (OSError, ValueError where it cannot be)."""
        self._use(build(self.source, self.folder, self.fingerprint))

    def _use(self, files: dict[str, tuple[int, int]]) -> None:
        self.files = files
        self.services = {}
        for name in files:
            parts = name.split("/")
            if len(parts) == 3:
                versions = self.services.setdefault(parts[0], {})
                versions.setdefault(parts[1], set()).add(parts[2][: -len(".json")])

    def load(self, name: str) -> Any:
        """The data of ``name`` (``dynamodb/2012-08-10/service-2``, ``endpoints``), checked;
        None where the copy has no such file. A damaged copy is rebuilt, and where that fails
        the file is read from botocore's own data."""
        key = name + ".json"
        if key not in self.files:
            return None
        found = self._checked(key)
        if found is None:
            log.debug("awsflock's copy of botocore's data is damaged (%s): rebuilding it", key)
            try:
                self.rebuild()
                found = self._checked(key)
            except (OSError, ValueError) as exc:
                log.debug("botocore's data not rebuilt (%s)", exc)
        if found is None:
            log.debug("reading %s from botocore's own data", name)
            from botocore.loaders import JSONFileLoader

            return JSONFileLoader().load_file(str(self.source / name))
        return found

    def _checked(self, key: str) -> Any:
        """The parsed file ``key`` of the copy if it is whole (its size and checksum those of
        the manifest), else None."""
        try:
            data = (self.folder / key).read_bytes()
        except OSError:
            return None
        if (len(data), zlib.crc32(data)) != self.files.get(key):
            return None
        from collections import OrderedDict  # as botocore's own loader parses

        try:
            return json.loads(data, object_pairs_hook=OrderedDict)
        except ValueError:
            return None


def read_manifest(folder: Path, fingerprint: str) -> dict[str, tuple[int, int]] | None:
    """The files of the copy in ``folder`` by its manifest, or None where the copy is missing,
    its manifest damaged or made from another botocore than ``fingerprint``."""
    try:
        data = json.loads((folder / MANIFEST).read_bytes())
        if data["source"] != fingerprint:
            log.debug("%s was made from another botocore (%s)", folder, data["source"])
            return None
        return {str(k): (int(v[0]), int(v[1])) for k, v in data["files"].items()}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        log.debug("the manifest of %s is damaged (%r)", folder, exc)
        return None


def intact(folder: Path, fingerprint: str) -> bool:
    """Whether the copy in ``folder`` is whole: its manifest, and every file it lists."""
    files = read_manifest(folder, fingerprint)
    if files is None:
        return False
    for key, expected in files.items():
        try:
            data = (folder / key).read_bytes()
        except OSError:
            return False
        if (len(data), zlib.crc32(data)) != expected:
            return False
    return True


def build(source: Path, folder: Path, fingerprint: str) -> dict[str, tuple[int, int]]:
    """Write the copy of ``source`` in a folder of its own beside ``folder``, durably, then
    rename it into place: a reader never sees half of one. Its files and their checksums."""
    # Only making the copy needs these: imported here, not on every command's start-up.
    import shutil
    import tempfile

    root = folder.parent
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale(root, folder.name)
    work = Path(tempfile.mkdtemp(prefix=folder.name + ".new-", dir=root))
    try:
        files = _write(source, work, fingerprint)
        _place(work, folder, fingerprint)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return files


def _place(work: Path, folder: Path, fingerprint: str) -> None:
    """Rename ``work`` to ``folder``. A copy in place (renaming over a folder that has files
    fails) is kept if whole (another process made it meanwhile), else moved aside first."""
    import shutil
    import tempfile

    for _ in range(3):  # each round loses only to another process that placed a copy
        try:
            os.rename(work, folder)
        except OSError:
            if intact(folder, fingerprint):
                return  # the one another process made: ours is removed by the caller
        else:
            _fsync_dir(folder.parent)
            return
        aside = Path(tempfile.mkdtemp(prefix=folder.name + ".bad-", dir=folder.parent))
        # Over an empty folder: allowed. Gone already: another process moved it aside.
        with contextlib.suppress(FileNotFoundError):
            os.rename(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)
    raise OSError(f"cannot put the copy of botocore's data in place at {folder}")


def _remove_stale(root: Path, name: str) -> None:
    """Remove what builds of ``name`` left when killed half-way, long ago enough not to be a
    build under way in another process."""
    import shutil
    import time

    for entry in root.glob(name + ".*"):
        try:
            if time.time() - entry.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass


def _fingerprint(source: Path) -> str:
    """A short name for the installed data: botocore's version, and the size and time of the
    files copied (a reinstall of the same version changes them)."""
    import botocore

    parts = [botocore.__version__, str(source)]
    for name in (*SHARED, f"{SERVICE}/{API_VERSION}/service-2"):
        found = _find(source, name)
        stat = found.stat()
        parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
    return f"{botocore.__version__}-{hashlib.sha256('|'.join(parts).encode()).hexdigest()[:12]}"


def _find(source: Path, name: str) -> Path:
    """``name`` in the data folder, as botocore stores it (``.json`` or ``.json.gz``)."""
    for suffix in (".json", ".json.gz"):
        path = source / (name + suffix)
        if path.is_file():
            return path
    raise ValueError(f"botocore's data has no {name}")


def _read(path: Path) -> Any:
    import gzip

    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(data)


def _models(source: Path) -> dict[str, Path]:
    """The model folder copied of each service: DynamoDB's API version, and the latest of each
    credential service the installed botocore has."""
    found = {SERVICE: source / SERVICE / API_VERSION}
    for service in CREDENTIAL_SERVICES:
        versions = sorted(
            p for p in (source / service).glob("*") if p.is_dir() and any(p.glob("service-2.*"))
        )
        if versions:
            found[service] = versions[-1]
    return found


def _write(source: Path, out: Path, fingerprint: str) -> dict[str, tuple[int, int]]:
    """Write the copy into ``out``, each file and folder fsynced, the manifest last."""
    files: dict[str, tuple[int, int]] = {}
    folders = {out}

    def dump(name: str, data: Any) -> None:
        target = out / (name + ".json")
        target.parent.mkdir(parents=True, exist_ok=True)
        folders.update(p for p in target.parents if out in p.parents)
        blob = json.dumps(data, separators=(",", ":")).encode()
        _write_file(target, blob)
        files[name + ".json"] = (len(blob), zlib.crc32(blob))

    models = _models(source)
    for name in SHARED:
        data = _read(_find(source, name))
        if name == "endpoints":
            for partition in data["partitions"]:
                services = partition.get("services", {})
                partition["services"] = {k: v for k, v in services.items() if k in models}
        dump(name, data)
    for service, folder in models.items():
        for path in sorted(folder.iterdir()):
            if path.name.startswith("examples"):  # only for documentation
                continue
            data = _read(path)
            if path.name.startswith("service-2."):
                data = _undocumented(data)
            # sdk-extras files keep their second suffix: service-2.sdk-extras.json
            stem = path.name[: -len(".json.gz")] if path.suffix == ".gz" else path.stem
            dump(f"{service}/{folder.name}/{stem}", data)
    manifest = {"source": fingerprint, "files": {k: list(v) for k, v in sorted(files.items())}}
    _write_file(out / MANIFEST, json.dumps(manifest, indent=0).encode())
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        _fsync_dir(folder)
    return files


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def _fsync_dir(path: Path) -> None:
    """Make the names in folder ``path`` durable (where the system allows a folder's fsync)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse a folder's fsync: nothing more can be done
    finally:
        os.close(fd)


def _undocumented(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _undocumented(v) for k, v in data.items() if k not in DOC_KEYS}
    if isinstance(data, list):
        return [_undocumented(v) for v in data]
    return data
