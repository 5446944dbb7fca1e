"""Checkpoints in an Azure Blob Storage container: the Azure part of
:class:`~det_sdk.storage._objects.ObjectStoreStorage` (layout, manifest, sweep there).

Determined's fields: ``connection_string``, or ``account_url`` with ``credential`` (an
account key or a SAS token; none: the environment's, ``AZURE_*``).
"""

from __future__ import annotations

from typing import Any

from det_sdk.config.azure_strings import account_of_url, parse_connection_string
from det_sdk.errors import UsageError
from det_sdk.storage._objects import ObjectStoreStorage, store_options

__all__ = ["AzureStorage"]


class AzureStorage(ObjectStoreStorage):
    """Checkpoints as blobs under ``az://container/prefix/``.

    >>> AzureStorage("ckpts", "run", connection_string="UseDevelopmentStorage=true"
    ...              ).describe()  # doctest: +SKIP
    'az://ckpts/run'
    """

    scheme, kind = "az", "azure"
    location_field = "container"
    missing_marks = ("ContainerNotFound",)
    refused_marks = ("AuthenticationFailed", "AuthorizationFailure")

    def __init__(self, container: str, prefix: str | None = None, *,
                 connection_string: str | None = None, account_url: str | None = None,
                 credential: str | None = None, owner: dict[str, Any] | None = None) -> None:
        self.container = container
        self._from_string = connection_string is not None
        self._config: dict[str, Any] = {}
        if connection_string is not None:
            conn = parse_connection_string(connection_string)
            self.endpoint: str = conn.blob_endpoint
            self._config["account_name"] = conn.account_name
            if conn.account_key:
                self._config["account_key"] = conn.account_key
            else:
                self._config["sas_key"] = conn.sas_token
        elif account_url is not None:
            self.endpoint = account_url.rstrip("/")
            self._config["account_name"] = account_of_url(self.endpoint)
            if credential is not None:  # a SAS token has a signature; a key does not
                sas = "sig=" in credential
                self._config["sas_key" if sas else "account_key"] = (
                    credential.lstrip("?") if sas else credential)
        else:
            raise UsageError(
                "checkpoint_storage: type azure needs connection_string or account_url")
        self._config["endpoint"] = self.endpoint
        super().__init__(container, prefix, owner=owner)

    def _make_store(self, retry: dict[str, Any]) -> Any:
        from obstore.store import AzureStore

        return AzureStore(self.container, prefix=self.prefix or None,
                          **store_options(self._config, self.endpoint, retry))

    def credential_fields(self) -> str:
        if self._from_string:
            return "checkpoint_storage.connection_string"
        if "account_key" in self._config or "sas_key" in self._config:
            return "checkpoint_storage.credential"
        return ("checkpoint_storage.credential (none given: the environment's AZURE_* "
                "credentials)")
