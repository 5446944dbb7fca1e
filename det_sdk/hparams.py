"""Hyperparameters as the training script sees them: a read-only mapping with helpful errors.

>>> hp = HParams({"dropout": 0.5, "global_batch_size": 128})
>>> hp["dropout"]
0.5
>>> hp["lr"]
Traceback (most recent call last):
...
det_sdk.hparams.HParamKeyError: hyperparameter 'lr' is not defined; known: ...

Nested hyperparameters (Determined's: a group of hyperparameters inside one) read as
nested dicts; a group is a read-only ``dict`` whose missing keys name their dotted path:

>>> hp = HParams({"optimizer": {"learning_rate": 0.01, "name": "adam"}})
>>> hp["optimizer"]["learning_rate"]
0.01
>>> hp["optimizer"]["lr"]
Traceback (most recent call last):
...
det_sdk.hparams.HParamKeyError: hyperparameter 'optimizer.lr' is not defined; known: ...
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from det_sdk.errors import DetSdkError

if TYPE_CHECKING:
    from det_sdk.config import ExperimentConfig

__all__ = ["HParamGroup", "HParamKeyError", "HParams", "LocalHParamsError", "flat_hparams",
           "local_hparams", "merge_hparams"]


class HParamKeyError(DetSdkError, KeyError):
    """A hyperparameter the script asked for that the experiment does not define."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


class ReadOnlyHParamsError(DetSdkError, TypeError):
    """An assignment to the hyperparameters, which are the trial's and read-only."""


class LocalHParamsError(DetSdkError, ValueError):
    """A run off the cluster whose config searches a hyperparameter it has no value for."""


def _known(keys: Iterator[str] | Mapping[str, Any]) -> str:
    return ", ".join(sorted(str(k) for k in keys)) or "(none)"


class HParamGroup(dict):
    """A nested group of hyperparameter values: a ``dict`` that cannot be changed.

    It is a real ``dict`` (``json.dumps``, ``**group`` and ``isinstance(.., dict)``
    work); a missing key raises ``HParamKeyError`` with its dotted path;
    ``group.to_dict()`` (or ``copy.deepcopy(group)``) gives a plain nested dict to change.

    >>> g = HParamGroup({"lr": 0.1}, "optimizer")
    >>> g["lr"], isinstance(g, dict)
    (0.1, True)
    >>> g["lr"] = 0.2
    Traceback (most recent call last):
    ...
    det_sdk.hparams.ReadOnlyHParamsError: hyperparameters are read-only (optimizer); ...
    """

    __slots__ = ("_path",)

    def __init__(self, values: Mapping[str, Any], path: str) -> None:
        super().__init__({k: _freeze(v, f"{path}.{k}") for k, v in values.items()})
        self._path = path

    def __missing__(self, key: str) -> NoReturn:
        raise HParamKeyError(f"hyperparameter '{self._path}.{key}' is not defined; "
                             f"known: {_known(self)}")

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyHParamsError(f"hyperparameters are read-only ({self._path}); "
                                   "change a copy: dict(...)")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:  # pickles as the plain nested dict
        return (dict, (_thaw(self),))

    def to_dict(self) -> dict[str, Any]:
        """A plain (nested, changeable) copy."""
        return _thaw(self)


def _freeze(value: Any, path: str) -> Any:
    return HParamGroup(value, path) if isinstance(value, Mapping) else value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    return value


class HParams(Mapping[str, Any]):
    """The hyperparameters of one trial (or of a local run); nested groups are
    ``HParamGroup`` (read-only dicts)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = {k: _freeze(v, str(k)) for k, v in values.items()}

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            hint = ""
            if isinstance(key, str) and "." in key and key.split(".", 1)[0] in self._values:
                path = "".join(f"[{p!r}]" for p in key.split("."))
                hint = f" (a nested hyperparameter reads as hparams{path})"
            raise HParamKeyError(
                f"hyperparameter {key!r} is not defined; known: {_known(self._values)}{hint}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"HParams({self._values!r})"

    def to_dict(self) -> dict[str, Any]:
        """A plain copy: nested groups as plain (changeable) dicts."""
        return {k: _thaw(v) for k, v in self._values.items()}


def flat_hparams(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested hyperparameter values by dotted name, for display (tables, columns).

    >>> flat_hparams({"bs": 32, "optimizer": {"lr": 0.1, "name": "adam"}})
    {'bs': 32, 'optimizer.lr': 0.1, 'optimizer.name': 'adam'}
    """
    out: dict[str, Any] = {}
    for k, v in values.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flat_hparams(v, f"{name}."))
        else:
            out[name] = v
    return out


def merge_hparams(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` on top, group by group (a deep merge; neither is changed).

    >>> merge_hparams({"opt": {"lr": 0.1, "m": 0.9}, "bs": 8}, {"opt": {"lr": 0.5}})
    {'opt': {'lr': 0.5, 'm': 0.9}, 'bs': 8}
    """
    out = {k: _thaw(v) for k, v in base.items()}
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge_hparams(out[k], v)
        else:
            out[k] = _thaw(v)
    return out


def local_hparams(config: ExperimentConfig | None, defaults: Mapping[str, Any]) -> HParams:
    """Hyperparameters of a run off the cluster.

    ``defaults`` (from ``init(hparams=...)``) are overridden by the config's constant
    values, leaf by leaf in nested groups (a deep merge: a default of a group keeps the
    keys the config does not set). A searched hyperparameter (int/double/log/categorical)
    has no single value, so it needs one in ``defaults`` (at its nested place); without
    it this is an error that names it by its dotted path.

    >>> from det_sdk.config import parse_experiment_config
    >>> cfg = parse_experiment_config({"hyperparameters": {"opt": {
    ...     "lr": {"type": "log", "minval": -4, "maxval": -1}, "m": 0.9}}})
    >>> local_hparams(cfg, {"opt": {"lr": 0.01}}).to_dict()
    {'opt': {'lr': 0.01, 'm': 0.9}}
    """
    from det_sdk.config import ConstHP, hp_leaves

    consts = []
    unresolved = []
    for path, spec in hp_leaves(config.hyperparameters if config else {}):
        if isinstance(spec, ConstHP):
            consts.append((path, spec.val))
        elif not _has(defaults, path):
            unresolved.append(f"{'.'.join(path)} ({spec.type})")
    if unresolved:
        raise LocalHParamsError(
            "searched hyperparameters need a local value when running off the cluster: "
            + ", ".join(unresolved)
            + "; pass them as defaults, e.g. det.keras.init(hparams={...}) (a nested one "
            "at its place: hparams={'optimizer': {'learning_rate': 0.01}})"
        )
    values = _thaw(defaults)
    for path, value in consts:  # each constant replaces the default at its place
        node = values
        for part in path[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[path[-1]] = _thaw(value)
    return HParams(values)


def _has(values: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = values
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True
