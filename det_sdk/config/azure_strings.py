"""What an Azure Storage connection string holds (``checkpoint_storage.connection_string``):
the account, its key or SAS token, and the blob endpoint. Errors never show the string.

    >>> c = parse_connection_string("DefaultEndpointsProtocol=https;AccountName=acct;"
    ...                             "AccountKey=c2VjcmV0;EndpointSuffix=core.windows.net")
    >>> (c.account_name, c.blob_endpoint)
    ('acct', 'https://acct.blob.core.windows.net')
    >>> parse_connection_string("AccountName=acct")
    Traceback (most recent call last):
    ...
    det_sdk.config.ConfigError: connection_string: has no AccountKey or SharedAccessSignature ...
"""

from __future__ import annotations

from dataclasses import dataclass

from det_sdk.config._base import ConfigError

#: Azurite's well-known development account (``UseDevelopmentStorage=true``): public, not a secret
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
           "KBHBeksoGMGw==")


@dataclass(frozen=True)
class AzureConnection:
    account_name: str
    blob_endpoint: str
    account_key: str | None = None
    sas_token: str | None = None


def parse_connection_string(text: str) -> AzureConnection:
    """The parts of a connection string; :class:`ConfigError` naming the field (never
    its text: it holds the key) if one is missing."""
    parts: dict[str, str] = {}
    for item in text.strip().strip(";").split(";"):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("connection_string: not KEY=VALUE pairs separated by ';' "
                              "(AccountName=...;AccountKey=...;...)")
        parts[key.strip().lower()] = value.strip()
    if parts.get("usedevelopmentstorage", "").lower() == "true":
        return AzureConnection(DEV_ACCOUNT, f"http://127.0.0.1:10000/{DEV_ACCOUNT}",
                               account_key=DEV_KEY)
    account_key = parts.get("accountkey") or None
    sas = parts.get("sharedaccesssignature") or None
    if not account_key and not sas:
        raise ConfigError("connection_string: has no AccountKey or SharedAccessSignature "
                          "(copy it whole from the storage account's Access keys)")
    endpoint = parts.get("blobendpoint")
    name = parts.get("accountname") or ""
    if not name and endpoint:  # a SAS string may name only the endpoint
        host = endpoint.split("://", 1)[-1].split("/", 1)
        name = host[1].strip("/") if len(host) > 1 and host[1].strip("/") else \
            host[0].split(".", 1)[0]
    if not name:
        raise ConfigError("connection_string: has no AccountName (nor a BlobEndpoint)")
    if not endpoint:
        protocol = parts.get("defaultendpointsprotocol", "https")
        suffix = parts.get("endpointsuffix", "core.windows.net")
        endpoint = f"{protocol}://{name}.blob.{suffix}"
    return AzureConnection(name, endpoint.rstrip("/"), account_key=account_key,
                           sas_token=sas or None)


def account_of_url(url: str) -> str:
    """The storage account an ``account_url`` names: the host's first label
    (``https://acct.blob.core.windows.net``) or, for an emulator, the path
    (``http://127.0.0.1:10000/devstoreaccount1``).

    >>> account_of_url("http://127.0.0.1:10000/devstoreaccount1")
    'devstoreaccount1'
    """
    host, _, path = url.split("://", 1)[-1].partition("/")
    return path.strip("/").split("/", 1)[0] if path.strip("/") else host.split(".", 1)[0]
