"""A trimmed copy of botocore's data for the DynamoDB client, so building it is quick.

botocore's own loader lists every service it knows (about 450 folders) to check a name, parses
the 1.2 MB ``endpoints.json`` for all services, and reads a service model full of documentation:
about 35 ms of every command's start-up. This room makes, once per installed botocore, a copy of
only what a DynamoDB client reads — the DynamoDB model (its documentation left out), its
endpoint rule set, and the shared files, with ``endpoints.json`` cut to DynamoDB — into the
user's cache, from botocore's own installed files (nothing vendored, so nothing drifts), and
hands botocore a ``Loader`` over it.

The copy counts as botocore's bundled data (``is_builtin_path``): botocore feeds endpoints from
a *non*-bundled ``endpoints.json`` into its rule-set resolver as a custom endpoint, which would
change how FIPS and dual-stack endpoints resolve. Where the user points botocore at data of
their own (``AWS_DATA_PATH``, ``data_path`` in the config, or ``~/.aws/models``), or the cache
cannot be written, the normal loader is used.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.loaders import Loader
    from botocore.session import Session

log = logging.getLogger("awsflock.store")

SERVICE = "dynamodb"
API_VERSION = "2012-08-10"
#: The files of botocore's data folder a client reads whatever its service.
SHARED = ("endpoints", "partitions", "sdk-default-configuration", "_retry")
#: What a model keeps only for documentation (docstrings, help), never for a request.
DOC_KEYS = frozenset({"documentation", "documentationUrl"})


def cache_root() -> Path:
    """``AWSFLOCK_CACHE_DIR``, else ``$XDG_CACHE_HOME/awsflock``, else ``~/.cache/awsflock``."""
    named = os.environ.get("AWSFLOCK_CACHE_DIR")
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "awsflock"


def use_trimmed(session: Session) -> bool:
    """Give ``session`` a loader over the trimmed copy (made now if missing). False, and the
    session left as it was, where the user has data of their own or the copy cannot be had."""
    from botocore.loaders import Loader

    if session.get_config_variable("data_path") or os.path.isdir(
        Loader.CUSTOMER_DATA_PATH  # expanded by botocore when imported
    ):
        return False
    try:
        folder = trimmed_data(Path(Loader.BUILTIN_DATA_PATH), cache_root())
    except (OSError, ValueError) as exc:  # a read-only home, a full disk: the normal loader
        log.debug("botocore's data not trimmed (%s); using all of it", exc)
        return False
    session.register_component("data_loader", _loader(folder))
    return True


def _loader(folder: Path) -> Loader:
    from botocore.loaders import Loader

    class TrimmedLoader(Loader):
        """botocore's loader over the trimmed copy only, which counts as its bundled data."""

        def is_builtin_path(self, path: str) -> bool:
            return path.startswith(str(folder)) or super().is_builtin_path(path)

    return TrimmedLoader(extra_search_paths=[str(folder)], include_default_search_paths=False)


def trimmed_data(source: Path, root: Path) -> Path:
    """The trimmed copy of the botocore data folder ``source`` under ``root``, made if missing.
    Its name changes with what it was made from (any reinstall of botocore), and it is made
    in a folder of its own, then renamed into place: a reader never sees half of one."""
    folder = root / f"botocore-{_fingerprint(source)}"
    if folder.is_dir():
        return folder
    # Only making the copy needs these: imported here, not on every command's start-up.
    import shutil
    import tempfile

    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=root))
    try:
        _write(source, work)
        try:
            os.rename(work, folder)
        except OSError:
            if not folder.is_dir():  # not another process that made it meanwhile
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return folder


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
    import json

    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(data)


def _write(source: Path, out: Path) -> None:
    import json

    def dump(name: str, data: Any) -> None:
        target = out / (name + ".json")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data, separators=(",", ":")))

    for name in SHARED:
        data = _read(_find(source, name))
        if name == "endpoints":
            for partition in data["partitions"]:
                services = partition.get("services", {})
                partition["services"] = {k: v for k, v in services.items() if k == SERVICE}
        dump(name, data)
    models = source / SERVICE / API_VERSION
    for path in sorted(models.iterdir()):
        name = path.name.split(".", 1)[0]
        if name.startswith("examples"):  # only for documentation
            continue
        data = _read(path)
        if name == "service-2":
            data = _undocumented(data)
        # sdk-extras files keep their second suffix: service-2.sdk-extras.json
        stem = path.name[: -len(".json.gz")] if path.suffix == ".gz" else path.stem
        dump(f"{SERVICE}/{API_VERSION}/{stem}", data)


def _undocumented(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _undocumented(v) for k, v in data.items() if k not in DOC_KEYS}
    if isinstance(data, list):
        return [_undocumented(v) for v in data]
    return data
