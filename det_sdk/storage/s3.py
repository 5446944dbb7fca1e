"""Checkpoints in an S3 bucket (AWS S3, or any S3 server: ``endpoint_url``): the S3 part
of :class:`~det_sdk.storage._objects.ObjectStoreStorage` (layout, manifest, sweep there).
"""

from __future__ import annotations

import os
from typing import Any

from det_sdk.storage._objects import ObjectStoreStorage, store_options

__all__ = ["S3Storage"]


class S3Storage(ObjectStoreStorage):
    """Checkpoints as objects under ``s3://bucket/prefix/``.

    >>> S3Storage("ckpts", "team/a").describe()  # doctest: +SKIP
    's3://ckpts/team/a'
    """

    scheme = kind = "s3"
    endpoint_field = "checkpoint_storage.endpoint_url"
    missing_marks = ("NoSuchBucket",)

    def __init__(self, bucket: str, prefix: str | None = None, *,
                 endpoint_url: str | None = None, access_key: str | None = None,
                 secret_key: str | None = None, owner: dict[str, Any] | None = None) -> None:
        self.bucket, self.endpoint_url = bucket, endpoint_url
        self._keys_given = access_key is not None
        self._config: dict[str, Any] = {}
        if endpoint_url:
            self._config["endpoint"] = endpoint_url
        if access_key is not None:
            self._config.update(access_key_id=access_key, secret_access_key=secret_key)
        if not os.environ.get("AWS_REGION") and not os.environ.get("AWS_DEFAULT_REGION"):
            self._config["region"] = "us-east-1"  # S3's default; a custom endpoint ignores it
        # Signing a body means a SHA-256 of every byte sent (here half the client's CPU of
        # an upload, taken from training). Over HTTPS, TLS already protects the body, so,
        # as botocore does, it is sent unsigned there; over plain HTTP the signature is
        # the only check the server makes, so it stays. Every file's own SHA-256 is in
        # the manifest and verified on every read either way. (Without endpoint_url, the
        # client takes AWS_ENDPOINT_URL from the environment: that one decides then.)
        endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or ""
        self._config["unsigned_payload"] = not endpoint.startswith("http://")
        super().__init__(bucket, prefix, owner=owner)

    @property
    def signs_payload(self) -> bool:
        """Whether each request's body is signed (plain ``http://`` endpoints only).

        >>> S3Storage("ckpts", endpoint_url="http://minio:9000").signs_payload
        True
        >>> S3Storage("ckpts").signs_payload  # AWS, over HTTPS
        False
        """
        return not self._config["unsigned_payload"]

    def _make_store(self, retry: dict[str, Any]) -> Any:
        from obstore.store import S3Store

        return S3Store(self.bucket, prefix=self.prefix or None,
                       **store_options(self._config, self.endpoint_url, retry))

    def credential_fields(self) -> str:
        if self._keys_given:
            return "checkpoint_storage.access_key / secret_key"
        return ("checkpoint_storage.access_key / secret_key (none given: the credential "
                "chain's AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)")
