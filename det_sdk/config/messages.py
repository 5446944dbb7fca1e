"""A config's validation errors as users read them: one line per problem, each naming the
field by the dotted path they wrote (never pydantic's union tags).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from det_sdk.config.hyperparameters import _GROUP


def format_validation_error(err: ValidationError, source: str = "config",
                            known: Mapping[str, set[str]] | None = None) -> str:
    """One line per problem, each naming the field by its dotted path.

    ``known``: the field names of a section (``""``: the top level), from which an
    unknown field gets a "did you mean" (a typo of a Determined field, most often).
    """
    lines = []
    for e in err.errors():
        loc = _user_path(e["loc"])
        path = ".".join(loc) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "union_tag_invalid" and e.get("ctx", {}).get("tag") == "<missing>":
            msg = ("has a range but no 'type'; give one of: int, double, log, categorical "
                   "(or write a constant as a plain value)")
        elif e["type"] == "union_tag_invalid" and loc[:1] == ["hyperparameters"]:
            # the discriminator is a function (a mapping without `type` is a nested
            # group): say it as the user wrote it, without the group's tag
            tags = ", ".join(repr(t) for t in ("const", "int", "double", "log", "categorical"))
            msg = (f"Input tag {e['ctx']['tag']!r} found using 'type' does not match any of "
                   f"the expected tags: {tags} (or a mapping without 'type': a nested group)")
        elif e["type"] == "extra_forbidden" and loc[:1] == ["searcher"] and loc[-1] in (
                "time_metric", "max_time"):
            msg = ("unknown field for this searcher: only adaptive_asha takes time_metric + "
                   "max_time (single, grid and random train each trial as its script says, "
                   "or to max_length)")
        elif e["type"] == "extra_forbidden" and len(loc) > 1 and loc[-2] in _LENGTH_NAMES:
            msg = "unknown field (a length is one of {epochs: N}, {batches: N}, {records: N})"
        elif e["type"] == "extra_forbidden":
            msg = "unknown field"
            near = difflib.get_close_matches(loc[-1], (known or {}).get(".".join(loc[:-1]), ()),
                                             n=1, cutoff=0.75)
            if near:
                msg += f" (did you mean {near[0]!r}?)"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "model_type" and loc and loc[-1] in _LENGTH_NAMES:
            # never pydantic's "valid dictionary or instance of Length"
            msg = f"expected {_LENGTH_FORMS[loc[-1]]}, got {e.get('input')!r}"
        elif "input" in e and e["type"] != "value_error":
            msg = f"{msg} (got {e['input']!r})"
        if _NAMED.match(msg) and (not loc or msg.startswith((f"{path}.", f"{path}:"))):
            lines.append(f"  {msg}")  # a check that names its own field
            continue
        lines.append(f"  {path}: {msg}")
    return f"invalid {source}:\n" + "\n".join(lines)


_NAMED = re.compile(r"[A-Za-z_][\w.]*: ")
_LENGTH_NAMES = {"max_length", "min_validation_period", "min_checkpoint_period"}
_LENGTH_FORMS = {
    "max_length": "a length: an integer (unitless, the Core API's: max_length: 100) or one "
                  "of {epochs: N}, {batches: N}, {records: N}",
    "min_validation_period": "a length: {epochs: N}, {batches: N}, {records: N}, or an "
                             "integer of steps (scheduling_unit batches each)",
}
_LENGTH_FORMS["min_checkpoint_period"] = _LENGTH_FORMS["min_validation_period"]


_HP_TAGS = {"const", "int", "double", "log", "categorical"}
_SEARCHER_TAGS = {"single", "grid", "random", "adaptive_asha"}


def _user_path(loc: tuple[Any, ...]) -> list[str]:
    """The path as the user wrote it: without the union tags pydantic inserts.

    Tags sit at known places (``searcher.<name>``, ``hyperparameters.<hp>.<type>``),
    so a user's key that happens to read like a tag ("log", "random") is kept.
    """
    loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith("function-")))
    out = []
    start = 0
    if loc and loc[0] == "hyperparameters":
        # hyperparameters, name, tag[, name, tag ...] while the tag is a nested group's
        out.append("hyperparameters")
        start = 1
        while start + 1 < len(loc) and loc[start + 1] in _HP_TAGS | {_GROUP}:
            out.append(str(loc[start]))
            start += 2
            if loc[start - 1] != _GROUP:
                break
    for i, part in enumerate(loc[start:], start):
        if i == 1 and loc[0] == "searcher" and part in _SEARCHER_TAGS:
            continue
        out.append(str(part))
    return out
