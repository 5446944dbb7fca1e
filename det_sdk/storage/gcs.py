"""Checkpoints in a Google Cloud Storage bucket: the GCS part of
:class:`~det_sdk.storage._objects.ObjectStoreStorage` (layout, manifest, sweep there).

Credentials are found as Google's client finds them (``GOOGLE_APPLICATION_CREDENTIALS``,
a service account, the metadata server); ``STORAGE_EMULATOR_HOST`` (as Google's clients
read it) sends every request to an emulator, unauthenticated.
"""

from __future__ import annotations

import json
import os
from typing import Any

from det_sdk.storage._objects import ObjectStoreStorage, store_options

__all__ = ["GCSStorage", "emulator_host"]


def emulator_host() -> str | None:
    """``STORAGE_EMULATOR_HOST`` as a URL (Google's clients accept it without a scheme)."""
    host = os.environ.get("STORAGE_EMULATOR_HOST", "").strip().rstrip("/")
    if not host:
        return None
    return host if "://" in host else f"http://{host}"


class GCSStorage(ObjectStoreStorage):
    """Checkpoints as objects under ``gs://bucket/prefix/``.

    >>> GCSStorage("ckpts", "team/a").describe()  # doctest: +SKIP
    'gs://ckpts/team/a'
    """

    scheme, kind = "gs", "gcs"
    endpoint_field = "STORAGE_EMULATOR_HOST (where set)"
    missing_marks = ("bucket not found", "The specified bucket does not exist")

    def __init__(self, bucket: str, prefix: str | None = None, *,
                 owner: dict[str, Any] | None = None) -> None:
        self.bucket = bucket
        self.emulator = emulator_host()
        super().__init__(bucket, prefix, owner=owner)

    def _make_store(self, retry: dict[str, Any]) -> Any:
        from obstore.store import GCSStore

        config: dict[str, Any] = {}
        if self.emulator:
            # object_store's way to an emulator: a service account that names the base URL
            # and asks for no OAuth token (its keys are never used)
            config["service_account_key"] = json.dumps({
                "gcs_base_url": self.emulator, "disable_oauth": True,
                "client_email": "", "private_key": "", "private_key_id": ""})
        return GCSStore(self.bucket, prefix=self.prefix or None,
                        **store_options(config, self.emulator, retry))

    def credential_fields(self) -> str:
        return ("the credentials Google's client finds (GOOGLE_APPLICATION_CREDENTIALS, the "
                "service account)")
