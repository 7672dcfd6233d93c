"""YAML loading that refuses what PyYAML silently accepts (duplicate keys, non-mappings)."""
from __future__ import annotations

from pathlib import Path

import yaml

from common.errors import ConfigError


class _StrictLoader(yaml.SafeLoader):
    pass


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load_yaml_mapping(path: str | Path, *, required: bool = True) -> dict:
    """Load a YAML file whose top level must be a mapping with string keys.

    An empty file is an empty mapping. Errors are ConfigErrors naming the file.
    """
    path = Path(path)
    if not path.is_file():
        if required:
            raise ConfigError(f"{path}: file not found")
        return {}
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}{where}: invalid YAML: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys to values, got {type(data).__name__}")
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(f"{path}: key {key!r} must be a string")
    return data
