"""A config's YAML, read as YAML 1.2 (core schema) reads it, into JSON's types, with the
checks that keep a hostile file from costing a master anything (tags, duplicate keys,
depth, alias bombs).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from det_sdk.config._base import ConfigError

MAX_YAML_DEPTH = 64  # levels of nesting
MAX_YAML_VALUES = 1_000_000  # values once aliases are expanded

_YAML = "tag:yaml.org,2002:"
# The tags of YAML 1.2's core schema (JSON's types), plus the merge key `<<`
_JSON_TAGS = {f"{_YAML}{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")}
_MERGE_TAG = f"{_YAML}merge"
_KIND = {"str": "text", "int": "a number", "float": "a number", "bool": "a boolean",
         "null": "null", "seq": "a list", "map": "a mapping"}


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, resolving plain scalars as YAML 1.2's core schema does.

    YAML 1.2 (core schema) is what Determined reads: its master parses configs with a
    YAML 1.2 parser and its CLI with ruamel.yaml's safe loader (YAML 1.2). PyYAML alone
    follows YAML 1.1, where ``1e-3`` is the *string* ``'1e-3'`` (a float needs a dot).
    Here:

    - numbers: ``1e-3``, ``-1E+4``, ``.5``, ``+.5e1``, ``5.`` are floats; ``.inf``,
      ``-.Inf``, ``.nan`` too; ``0o17`` (octal) and ``0x1F`` (hex) are ints, ``017`` is
      17 (1.2 has no leading-zero octal) and ``1_000``/``1:30`` are strings;
    - booleans: only ``true``/``false`` (any of ``true``, ``True``, ``TRUE``); YAML 1.1's
      ``yes``, ``no``, ``on``, ``off``, ``y``, ``n`` are *strings*, as in Determined
      (write ``true``/``false`` for a boolean);
    - null: ``null``, ``Null``, ``NULL``, ``~`` and an empty value;
    - dates such as ``2024-01-01`` are strings (1.2 has no implicit timestamp), and
      ``=`` is a string;
    - a quoted scalar is always a string.

    A merge key ``<<: *a`` or ``<<: [*a, *b]`` merges as YAML users expect (the
    mapping's own keys win, then the first listed mapping).
    """

    yaml_implicit_resolvers: dict[Any, Any] = {}

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        """A ``[`` or ``{`` past MAX_YAML_DEPTH open ones is refused where the scanner
        meets it: PyYAML's scanner is quadratic in the depth of flow collections (3,000
        ``[`` took 1.1 s of CPU to refuse after the fact, 20 s on a loaded machine)."""
        if self.flow_level >= MAX_YAML_DEPTH:
            raise ConfigError(f"{_where(self.get_mark())}: nested too deeply (more than "
                              f"{MAX_YAML_DEPTH} levels)")
        super().fetch_flow_collection_start(token_class)

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """Merge keys as the YAML merge spec says: the mapping's own keys win, then the
        earlier of ``<<: [*a, *b]``. (PyYAML's own tells keys apart by the identity of
        their Python strings, so which of two merged ``lr`` wins was left to chance.)"""
        merged: list[list[Any]] = []
        own = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                own.append((key_node, value_node))
                continue
            sources = (value_node.value if isinstance(value_node, yaml.SequenceNode)
                       else [value_node])
            for sub in sources:
                if not isinstance(sub, yaml.MappingNode):
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"expected a mapping or a list of mappings for merging, but found "
                        f"{sub.id}", sub.start_mark)
                self.flatten_mapping(sub)
                merged.append(sub.value)
        # lowest priority first: the mapping is built with the last of a key winning
        node.value = [pair for sub in reversed(merged) for pair in sub] + own

    def construct_yaml_bool(self, node: yaml.ScalarNode) -> bool:
        value = self.construct_scalar(node)
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"{value!r} is not a boolean (true or false)")
        return bool(value.lower() == "true")

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        value = self.construct_scalar(node)
        digits = value.lstrip("+-")
        sign = -1 if value.startswith("-") else 1
        try:
            if digits[:2] in ("0o", "0x"):
                return sign * int(digits[2:], 8 if digits[1] == "o" else 16)
            return sign * int(digits, 10)
        except ValueError:
            raise ConfigError(f"{value!r} is not an integer") from None

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        value = self.construct_scalar(node)
        special = value.lower().lstrip("+-")
        if special in (".inf", ".nan"):
            return (-1.0 if value.startswith("-") else 1.0) * float(special[1:])
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{value!r} is not a number") from None


for _tag, _pattern, _first in [
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    ("float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
              r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+.0123456789"),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("merge", r"^(?:<<)$", "<"),
]:
    _Loader.add_implicit_resolver(f"{_YAML}{_tag}", re.compile(_pattern), list(_first))
for _tag in ("bool", "int", "float"):
    _Loader.add_constructor(f"{_YAML}{_tag}", getattr(_Loader, f"construct_yaml_{_tag}"))


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _check_json_nodes(loader: _Loader, node: yaml.Node, path: str = "", depth: int = 0,
                      seen: set[int] | None = None) -> None:
    """Refuse what JSON cannot hold, before anything is built: tags outside JSON's types
    (``!!binary``, ``!!set``, ``!!timestamp``, ``!!omap``, ``!!python/...``, ``!custom``),
    keys that are lists or mappings, and a key given twice in one mapping (last-wins
    would silently drop the first). Errors name the line and the field's path."""
    seen = set() if seen is None else seen
    if id(node) in seen:  # an alias: checked where its anchor is
        return
    seen.add(id(node))
    if depth > MAX_YAML_DEPTH:
        raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep")
    field = path or "(top level)"
    if node.tag not in _JSON_TAGS:
        name = node.tag.replace(_YAML, "!!")
        how = ("quote it to keep it as text" if isinstance(node, yaml.ScalarNode) else
               "write a plain list or mapping")
        raise ConfigError(
            f"{_where(node.start_mark)}: {field}: the YAML tag {name} has no JSON form; "
            f"expected text, a number, a boolean, null, a list or a mapping ({how})")
    if isinstance(node, yaml.ScalarNode):
        try:  # an explicit !!int, !!float or !!bool that its text does not match
            loader.construct_object(node)
        except ConfigError as err:
            raise ConfigError(f"{_where(node.start_mark)}: {field}: {err}") from None
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_json_nodes(loader, item, f"{path}[{i}]", depth + 1, seen)
    elif isinstance(node, yaml.MappingNode):
        keys: dict[Any, yaml.Node] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                raise ConfigError(
                    f"{_where(key.start_mark)}: {field}: a mapping key that is a "
                    f"{'list' if isinstance(key, yaml.SequenceNode) else 'mapping'} (YAML's "
                    f"'? [a, b]') has no JSON form; expected a plain key such as a name")
            if key.tag == _MERGE_TAG:
                # merged keys are overridden by the mapping's own: not duplicates
                _check_json_nodes(loader, value, f"{path}.<<" if path else "<<", depth + 1,
                                  seen)
                continue
            _check_json_nodes(loader, key, field, depth + 1, seen)  # its tag
            name = loader.construct_object(key)
            where = f"{path}.{name}" if path else str(name)
            if name in keys:
                raise ConfigError(
                    f"{_where(key.start_mark)}: {where}: duplicate key {name!r} at line "
                    f"{key.start_mark.line + 1} (first at line "
                    f"{keys[name].start_mark.line + 1}); give each key once")
            keys[name] = key
            _check_json_nodes(loader, value, where, depth + 1, seen)


def _expanded_size(obj: Any, depth: int = 0, memo: dict[int, int] | None = None,
                   active: set[int] | None = None) -> int:
    """How many values ``obj`` holds once YAML aliases are copied out (as JSON does).

    Aliases are shared objects, so this counts a node's size once and multiplies: an
    "alias bomb" of a few lines shows its billions without being expanded.

    >>> a = [1, 2]; _expanded_size([a, a, a])
    10
    """
    memo = {} if memo is None else memo
    active = set() if active is None else active
    if not isinstance(obj, (dict, list)):
        return 1
    if depth > MAX_YAML_DEPTH:
        raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep")
    key = id(obj)
    if key in memo:
        return memo[key]
    if key in active:
        raise ConfigError("a YAML alias refers to a value that contains it")
    active.add(key)
    items = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else obj
    size = 1 + sum(_expanded_size(v, depth + 1, memo, active) for v in items)
    active.discard(key)
    memo[key] = size
    return size


def load_yaml_text(text: str, source: str = "config") -> Any:
    """Parse a config's YAML as YAML 1.2 (core schema) reads it, into JSON's types.

    Numbers, booleans and nulls as :class:`_Loader` says (``1e-3`` is a float, ``yes`` a
    string); tags outside JSON's types, complex keys, duplicate keys, deep nesting and
    alias bombs are refused with a :class:`ConfigError` naming ``source``, the line and
    the field.

    >>> load_yaml_text("lr: 1e-3\\ndropout: .5\\nflag: yes")
    {'lr': 0.001, 'dropout': 0.5, 'flag': 'yes'}
    >>> load_yaml_text("{a: 1, a: 2}")
    Traceback (most recent call last):
    ...
    det_sdk.config.ConfigError: config: line 1, column 8: a: duplicate key 'a' at line 1 ...
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_json_nodes(loader, node)
        data = loader.construct_document(node)
        size = _expanded_size(data)
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply (more than {MAX_YAML_DEPTH} "
                          f"levels)") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source} is not valid YAML: {err}") from None
    finally:
        loader.dispose()
    if size > MAX_YAML_VALUES:
        raise ConfigError(f"{source}: its aliases expand to {size} values, over the limit of "
                          f"{MAX_YAML_VALUES} (an alias bomb?)")
    return data


def load_yaml_file(path: str | os.PathLike[str]) -> Any:
    """Read a YAML file, with errors that name the file."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except OSError as err:
        raise ConfigError(f"cannot read config file {p}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {p} is not text (UTF-8): {err}") from None
    return load_yaml_text(text, f"config file {p}")
