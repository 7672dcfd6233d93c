"""YAML loading that refuses what PyYAML silently accepts (duplicate keys, non-mappings)
and what would exhaust the machine reading a config (huge files, alias bombs, deep nesting).

Bounds, checked before anything is built from the document:
  - the file is at most MAX_FILE_BYTES long (read no further than that);
  - the document, with every alias expanded, has at most MAX_VALUES values
    ("billion laughs": nine aliases of nine aliases of ... are a few lines of
    text but 10**9 values for whatever walks them: a repr, a comparison, json);
  - no alias refers to a collection that contains it (a cycle);
  - collections nest at most MAX_DEPTH deep.
Every failure is a ConfigError naming the file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from common.errors import ConfigError, shown

MAX_FILE_BYTES = 1 << 20
MAX_VALUES = 100_000
MAX_DEPTH = 32


class YamlTooLarge(ConfigError):
    """A document refused for its size or shape (not for its syntax)."""


class _StrictLoader(yaml.SafeLoader):
    _depth = 0

    def compose_node(self, parent, index):
        # PyYAML composes recursively: refuse deep nesting before Python's recursion limit does.
        if self._depth >= MAX_DEPTH and self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            raise _TooBig(f"collections nested more than {MAX_DEPTH} deep", self.peek_event())
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError) as exc:
            # A value PyYAML's constructors cannot build: an integer of more than
            # 4300 digits, a date such as 2024-13-45.
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read the value: {_clip(str(exc))}", node.start_mark
            ) from None


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *base", flattened by construct_mapping
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # a list or mapping as a key
            raise yaml.constructor.ConstructorError(
                None, None, f"a {type(key).__name__} cannot be a key", key_node.start_mark
            ) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {shown(key)}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


class _TooBig(Exception):
    def __init__(self, problem: str, node: yaml.Node | yaml.Event) -> None:
        super().__init__(problem)
        self.problem, self.node = problem, node


def _check_expansion(root: yaml.Node) -> None:
    """Count the values of the document as if every alias were expanded (iteratively, each node once).

    PyYAML composes an alias as the very node it names, so the document is a
    graph; its expanded size is 1 + the expanded sizes of a node's children,
    summed with memoisation. A node met again while its own children are being
    counted is a cycle.
    """
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            total = 1 + sum(size[id(child)] for child in _children(node))
            if total > MAX_VALUES:
                raise _TooBig(f"more than {MAX_VALUES} values once aliases are expanded", node)
            size[key] = total
            continue
        if key in size:
            continue
        if key in on_path:
            raise _TooBig("an alias refers to a collection that contains it", node)
        children = _children(node)
        if not children:
            size[key] = 1
            continue
        if depth > MAX_DEPTH:
            raise _TooBig(f"collections nested more than {MAX_DEPTH} deep", node)
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in children if id(child) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def _load(text: str, where: str):
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except _TooBig as exc:
        start = exc.node.start_mark
        at = f" (line {start.line + 1})" if start is not None else ""
        raise YamlTooLarge(f"{where}{at}: refused: {exc.problem}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}{line}: invalid YAML: {_clip(problem)}") from None
    except RecursionError:
        raise YamlTooLarge(f"{where}: refused: collections nested more than {MAX_DEPTH} deep") from None
    except (ValueError, TypeError, OverflowError) as exc:  # the same, should one escape construct_object
        raise ConfigError(f"{where}: invalid YAML value: {_clip(str(exc))}") from None


def _clip(text: str, limit: int = 200) -> str:
    """A message from PyYAML or the OS as one line of bounded length."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "…"


def load_yaml_mapping(path: str | Path, *, required: bool = True) -> dict:
    """Load a YAML file whose top level must be a mapping with string keys.

    An empty file is an empty mapping. Errors are ConfigErrors naming the file.
    """
    path = Path(path)
    try:
        if not path.is_file():
            if required:
                raise ConfigError(f"{path}: file not found")
            return {}
        with path.open("rb") as stream:
            raw = stream.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise YamlTooLarge(f"{path}: refused: larger than {MAX_FILE_BYTES >> 20} MiB, too large for a config file")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {_clip(str(exc))}") from None
    data = _load(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys to values, got {type(data).__name__}")
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(f"{path}: key {shown(key)} must be a string")
    return data


def add_override_option(parser: argparse.ArgumentParser, flag: str, help: str, dest: str | None = None) -> None:
    """A repeatable ``FLAG KEY=VALUE`` option: the items in a list (``dest``: its name, else the flag's),
    each VALUE later read as YAML (``load_yaml_value``)."""
    parser.add_argument(flag, action="append", default=[], metavar="KEY=VALUE", dest=dest, help=help)


def load_yaml_value(text: str, where: str):
    """One YAML value given as text (``--set KEY=VALUE``), with the same bounds as a file."""
    if len(text) > MAX_FILE_BYTES:
        raise YamlTooLarge(f"{where}: refused: a value longer than {MAX_FILE_BYTES >> 20} MiB")
    return _load(text, where)
