"""Hyperparameters as the training script sees them: a read-only mapping with helpful errors.

>>> hp = HParams({"dropout": 0.5, "global_batch_size": 128})
>>> hp["dropout"]
0.5
>>> hp["lr"]
Traceback (most recent call last):
...
det_sdk.hparams.HParamKeyError: hyperparameter 'lr' is not defined; known: ...
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from det_sdk.config import ExperimentConfig

__all__ = ["HParamKeyError", "HParams", "local_hparams"]


class HParamKeyError(KeyError):
    """A hyperparameter the script asked for that the experiment does not define."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


class HParams(Mapping[str, Any]):
    """The hyperparameters of one trial (or of a local run)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = dict(values)

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            known = ", ".join(sorted(self._values)) or "(none)"
            raise HParamKeyError(
                f"hyperparameter {key!r} is not defined; known: {known}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"HParams({self._values!r})"

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)


def local_hparams(config: ExperimentConfig | None, defaults: Mapping[str, Any]) -> HParams:
    """Hyperparameters of a run off the cluster.

    ``defaults`` (from ``init(hparams=...)``) are overridden by the config's constant
    values. A searched hyperparameter (int/double/log/categorical) has no single value,
    so it needs one in ``defaults``; without it this is an error that says so.
    """
    from det_sdk.config import ConstHP

    values = dict(defaults)
    unresolved = []
    for name, spec in (config.hyperparameters if config else {}).items():
        if isinstance(spec, ConstHP):
            values[name] = spec.val
        elif name not in values:
            unresolved.append(f"{name} ({spec.type})")
    if unresolved:
        raise ValueError(
            "searched hyperparameters need a local value when running off the cluster: "
            + ", ".join(unresolved)
            + "; pass them as defaults, e.g. det.keras.init(hparams={...})"
        )
    return HParams(values)
