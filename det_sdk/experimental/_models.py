"""Determined's ``Model`` and ``ModelVersion`` over det_sdk's model registry
(``/api/v1/models``, det_sdk.master.models)."""

from __future__ import annotations

from typing import Any

from det_sdk.experimental._objects import Checkpoint, OrderBy

__all__ = ["Model", "ModelVersion"]


class ModelVersion:
    """One version of a model: a checkpoint under a model's name and a number."""

    def __init__(self, session: Any, row: dict[str, Any]) -> None:
        self._session = session
        self.model_name: str = row["model_name"]
        self.model_version: int = int(row["version"])
        self.checkpoint_uuid: str = row["checkpoint_uuid"]
        self.name: str = row.get("name") or ""
        self.creation_time: float = row["created"]

    def __repr__(self) -> str:
        return f"ModelVersion(model={self.model_name!r}, version={self.model_version})"

    @property
    def checkpoint(self) -> Checkpoint:
        """The version's checkpoint (``.download()`` it)."""
        return Checkpoint(self._session, self._session.checkpoint(self.checkpoint_uuid))


class Model:
    """A model of the registry (Determined's ``Model``)."""

    def __init__(self, session: Any, row: dict[str, Any]) -> None:
        self._session = session
        self._row = row

    def __repr__(self) -> str:
        return f"Model(name={self.name!r})"

    @property
    def model_id(self) -> int:
        return int(self._row["id"])

    @property
    def name(self) -> str:
        return str(self._row["name"])

    @property
    def description(self) -> str:
        return str(self._row.get("description") or "")

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self._row.get("metadata") or {})

    @property
    def username(self) -> str:
        """The name of the user who created it (Determined's ``Model.username``)."""
        return str(self._row.get("username") or "")

    def _path(self, tail: str = "") -> str:
        return f"/api/v1/models/{self.name}{tail}"

    def reload(self) -> None:
        self._row = self._session.request("GET", self._path())

    def register_version(self, checkpoint_uuid: str) -> ModelVersion:
        """Register ``checkpoint_uuid`` as the model's next version (1 first)."""
        row = self._session.request("POST", self._path("/versions"),
                                    json={"checkpoint_uuid": checkpoint_uuid})
        return ModelVersion(self._session, row)

    def get_version(self, version: int = -1) -> ModelVersion | None:
        """Version ``version`` (``-1``: the latest); None when the model has none."""
        from det_sdk.client import MasterError

        try:
            row = self._session.request("GET", self._path(f"/versions/{int(version)}"))
        except MasterError as err:
            if err.status == 404 and version == -1:
                return None
            raise
        return ModelVersion(self._session, row)

    def list_versions(self, order_by: OrderBy = OrderBy.DESC) -> list[ModelVersion]:
        """Every version, newest first (``OrderBy.ASC``: oldest first)."""
        rows = self._session.request("GET", self._path("/versions"))["versions"]
        if order_by == OrderBy.DESC:
            rows = rows[::-1]
        return [ModelVersion(self._session, r) for r in rows]

    get_versions = list_versions
