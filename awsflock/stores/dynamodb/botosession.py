"""The botocore session a DynamoDB store's client is made from: over the trimmed copy of
botocore's data (``botodata``) where it can be, with botocore's own data for the rest.

The session's credential chain makes its own clients from the same session (STS for
assume-role and web identity, SSO, sign-in...): the copy holds those services too, and a client
of any service the copy lacks is made by a plain botocore session (the same profile), so a
service the chain comes to need in a later botocore costs start-up time, never a command. A
service in the copy resolves its endpoints as botocore does: the copy's ``endpoints.json``
holds each of its services' entries and counts as botocore's bundled data.

Imported only when a client is made: it imports botocore.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import botocore.session
from botocore.exceptions import DataNotFoundError
from botocore.loaders import Loader, instance_cache

from awsflock.stores.dynamodb import botodata

log = logging.getLogger("awsflock.store")


class TrimmedLoader(Loader):
    """botocore's loader over the trimmed copy only, which counts as its bundled data. What it
    lists comes from the copy's manifest, and each file is checked as it is read (``Copy``)."""

    def __init__(self, copy: botodata.Copy) -> None:
        super().__init__(extra_search_paths=[str(copy.folder)], include_default_search_paths=False)
        self.copy = copy

    def is_builtin_path(self, path: str) -> bool:
        return path.startswith(str(self.copy.folder)) or bool(super().is_builtin_path(path))

    @instance_cache
    def list_available_services(self, type_name: str) -> list[str]:
        services = self.copy.services.items()
        return sorted(
            s for s, versions in services if any(type_name in t for t in versions.values())
        )

    @instance_cache
    def list_api_versions(self, service_name: str, type_name: str) -> list[str]:
        versions = self.copy.services.get(service_name, {})
        found = sorted(v for v, types in versions.items() if type_name in types)
        if not found:
            raise DataNotFoundError(data_path=service_name)
        return found

    @instance_cache
    def load_data_with_path(self, name: str) -> tuple[Any, str]:
        found = self.copy.load(name)
        if found is None:
            raise DataNotFoundError(data_path=name)
        return found, os.path.join(str(self.copy.folder), name)


class Session(botocore.session.Session):
    """A botocore session over the trimmed copy (where ``botodata.use_trimmed`` gives one),
    whose clients of services outside the copy come from a plain botocore session."""

    def __init__(self, profile: str | None = None) -> None:
        super().__init__(profile=profile)
        self._profile_asked = profile
        self._whole: botocore.session.Session | None = None
        self.copy = botodata.use_trimmed(self)
        if self.copy:
            self.register_component("data_loader", TrimmedLoader(self.copy))

    def create_client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:
        if not self.copy or service_name in self.copy.services:
            return super().create_client(service_name, *args, **kwargs)
        if self._whole is None:
            log.debug("%s is not in the copy of botocore's data: using all of it", service_name)
            self._whole = botocore.session.Session(profile=self._profile_asked)
        return self._whole.create_client(service_name, *args, **kwargs)
