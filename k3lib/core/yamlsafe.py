"""The kit's one YAML loader: PyYAML's safe loader, refusing a mapping that repeats a key.

`yaml.safe_load` keeps the last of two equal keys, so a second `capacity:` in a costs file (or a second `rules:` in a
parameters file) silently replaces the first. Every YAML file the kit reads goes through `safe_load` here: a repeated
key is a `yaml.constructor.ConstructorError` naming the key, its line and the line of the first, which each reader
turns into its one `BadInputError` line (exit 2) as it does any other invalid YAML.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError

__all__ = ["DuplicateKeyError", "UniqueKeyLoader", "safe_load"]


class DuplicateKeyError(ConstructorError):
    """A mapping that repeats a key; `problem` reads "duplicate key 'capacity' (first at line 3)"."""


class UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` with every mapping's keys checked for repeats (merge keys `<<` are PyYAML's own)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:  # type: ignore[override]
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                continue
            if first is not None:
                raise DuplicateKeyError("while constructing a mapping", node.start_mark,
                                        f"duplicate key {key!r} (first at line {first}); expected each key once",
                                        key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def safe_load(text: str | bytes) -> Any:
    """`yaml.safe_load` that refuses a repeated key (DuplicateKeyError, a yaml.YAMLError with its problem mark)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
