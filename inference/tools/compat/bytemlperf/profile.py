"""A ByteMLPerf backend's interact profile (``XXX.json``), answered without dialogs.

ByteMLPerf shows each entry of the profile as a dialog and passes the answers
to the backend as ``configs["interact_info"]``. InferPerf takes the answers
from the case config instead (docs/bytemlperf_migration.md):

  entry          one object of the JSON list: ``name``, ``note``, ``type``
                 (bool, int, float, str), ``default``, ``options``, ``depends``
                 and ByteMLPerf's ``dialog_type`` (Yes/No, Radiolist or Input
                 Dialog); other keys are ignored
  answer         ``interact_info: {NAME: VALUE}`` in a config (vendor config or
                 ``--set``), else a config key named like the entry (not one of
                 InferPerf's own typed keys), else the entry's ``default``
  depends        comma-separated names of earlier entries: the entry is only
                 asked (answered) when every one of them was answered truthy,
                 as ByteMLPerf's dialogs do

An empty file is an empty profile (ByteMLPerf's "no questions"). Everything
wrong is one ConfigError naming the file or the key and the entry.
This module reads JSON only, so that run.py can use it on the host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable

from common.errors import ConfigError, shown
from contract.config.case import CaseConfig, origin_of

TYPES = ("bool", "int", "float", "str")
DIALOGS = ("Yes/No Dialog", "Radiolist Dialog", "Input Dialog")
ANSWERS_KEY = "interact_info"  # ByteMLPerf's name for the answers: a mapping in a case config
_MISSING = object()
MAX_ENTRIES = 256


@dataclass(frozen=True)
class ProfileEntry:
    name: str
    type: str
    note: str = ""
    dialog_type: str | None = None
    default: Any = _MISSING
    options: tuple | None = None
    depends: tuple[str, ...] = ()

    @property
    def has_default(self) -> bool:
        return self.default is not _MISSING

    def coerce(self, value: Any) -> Any:
        """``value`` as this entry's type (ByteMLPerf writes numbers of int entries as strings); ValueError(reason)."""
        kind = self.type
        if kind == "bool":
            if isinstance(value, bool):
                return value
        elif isinstance(value, bool):
            pass
        elif kind == "str":
            if isinstance(value, (str, int, float)):
                return str(value)
        elif kind == "int":
            if isinstance(value, int):
                return value
            if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
                return int(value)
        elif kind == "float":
            if isinstance(value, (int, float)):
                return float(value)
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    pass
        raise ValueError(f"must be of type {kind}, got {shown(value)}")

    def check(self, value: Any) -> Any:
        """The coerced value, which must be one of ``options`` when the entry has them."""
        coerced = self.coerce(value)
        if self.options is not None and coerced not in self.options:
            raise ValueError(f"must be one of {', '.join(map(repr, self.options))}, got {shown(value)}")
        return coerced

    def describe(self) -> str:
        """One line for run.py --list."""
        parts = [self.type]
        if self.options is not None:
            parts.append("one of " + "|".join(map(str, self.options)))
        parts.append(f"default {json.dumps(self.default)}" if self.has_default else "no default")
        if self.depends:
            parts.append("if " + " and ".join(self.depends))
        return f"{self.name} ({', '.join(parts)})" + (f": {self.note}" if self.note else "")


def load_profile(path: Path) -> list[ProfileEntry]:
    """The entries of ``path``; an empty file is no entries. ConfigError naming the file otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path}: cannot read the interact profile: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return parse_profile(data, str(path))


def parse_profile(data: Any, where: str) -> list[ProfileEntry]:
    """Check a profile's entries (a list of objects, or null for none)."""
    if data is None:
        return []
    if not isinstance(data, list):
        raise ConfigError(f"{where}: an interact profile must be a JSON list of entries, got {type(data).__name__}")
    if len(data) > MAX_ENTRIES:
        raise ConfigError(f"{where}: lists {len(data)} entries, more than {MAX_ENTRIES}")
    entries: list[ProfileEntry] = []
    for index, raw in enumerate(data):
        try:
            entries.append(_entry(raw, entries))
        except ValueError as exc:
            name = raw.get("name") if isinstance(raw, dict) else None
            label = f"entry {shown(name)}" if isinstance(name, str) else f"entry {index}"
            raise ConfigError(f"{where}: {label} {exc}") from None
    return entries


def _entry(raw: Any, earlier: list[ProfileEntry]) -> ProfileEntry:
    if not isinstance(raw, dict):
        raise ValueError(f"must be a JSON object, got {shown(raw)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.isidentifier() or len(name) > 64:
        raise ValueError(
            f"needs a 'name' of letters, digits and '_' (it is answered as a config key), got {shown(name)}"
        )
    if any(e.name == name for e in earlier):
        raise ValueError("is listed twice")
    kind = raw.get("type")
    if kind not in TYPES:
        raise ValueError(f"needs a 'type' of {', '.join(TYPES)}, got {shown(kind)}")
    dialog = raw.get("dialog_type")
    if dialog is not None and dialog not in DIALOGS:
        raise ValueError(f"has 'dialog_type' {shown(dialog)}, not one of {', '.join(DIALOGS)}")
    if dialog == "Yes/No Dialog" and kind != "bool":
        raise ValueError(f"is a Yes/No Dialog, so its 'type' must be bool, got {shown(kind)}")
    note = raw.get("note") or ""
    if not isinstance(note, str):
        raise ValueError(f"has a 'note' that is not a string: {shown(note)}")
    entry = ProfileEntry(
        name=name, type=kind, note=note, dialog_type=dialog, depends=_depends(raw.get("depends"), earlier)
    )
    options = raw.get("options")
    if options is not None or dialog == "Radiolist Dialog":
        if not isinstance(options, list) or not options:
            raise ValueError(f"needs 'options', a non-empty list, got {shown(options)}")
        try:
            options = tuple(entry.coerce(option) for option in options)
        except ValueError as exc:
            raise ValueError(f"option {exc}") from None
        entry = _replace(entry, options=options)
    if "default" in raw and raw["default"] is not None:
        try:
            entry = _replace(entry, default=entry.check(raw["default"]))
        except ValueError as exc:
            raise ValueError(f"default {exc}") from None
    return entry


def _replace(entry: ProfileEntry, **changes: Any) -> ProfileEntry:
    values = {f.name: getattr(entry, f.name) for f in fields(entry)}
    values.update(changes)
    return ProfileEntry(**values)


def _depends(value: Any, earlier: list[ProfileEntry]) -> tuple[str, ...]:
    if value in (None, ""):
        return ()
    if not isinstance(value, str):
        raise ValueError(f"has 'depends' {shown(value)}: must be null or comma-separated entry names")
    names = tuple(part.strip() for part in value.split(",") if part.strip())
    known = {e.name for e in earlier}
    for name in names:
        if name not in known:
            raise ValueError(f"depends on {name!r}, which is not an earlier entry of the profile")
    return names


# A lookup gives (found, value, origin) for an entry name.
Lookup = Callable[[str], "tuple[bool, Any, str]"]


def config_lookup(config: CaseConfig, reserved: frozenset[str]) -> Lookup:
    """Answers from a case config: its ``interact_info`` mapping first, then a key named
    like the entry unless that name is one of InferPerf's own keys (``reserved``)."""
    answers = config.get(ANSWERS_KEY)
    if answers is not None and not isinstance(answers, dict):
        raise ConfigError(
            f"{origin_of(config, ANSWERS_KEY)}: key '{ANSWERS_KEY}' must be a mapping of interact profile entries to "
            "values"
        )

    def lookup(name: str) -> tuple[bool, Any, str]:
        if answers and name in answers:
            return True, answers[name], f"{origin_of(config, ANSWERS_KEY)}: key '{ANSWERS_KEY}.{name}'"
        if name not in reserved:
            value = config.get(name, _MISSING)
            if value is not _MISSING:
                return True, value, f"{origin_of(config, name)}: key '{name}'"
        return False, None, ""

    return lookup


def resolve_answers(entries: list[ProfileEntry], lookup: Lookup, backend: str, profile_name: str) -> dict[str, Any]:
    """ByteMLPerf's ``interact_info``: each entry's answer (given, or its default), in profile order."""
    answers: dict[str, Any] = {}
    for entry in entries:
        if any(not answers.get(name) for name in entry.depends):
            continue  # ByteMLPerf does not ask it
        found, value, origin = lookup(entry.name)
        if not found:
            if not entry.has_default:
                raise ConfigError(
                    f"{profile_name}: entry '{entry.name}' of backend {backend} has no default: "
                    f"answer it in the vendor config ({entry.name}: ...) or with --set {entry.name}=..."
                )
            answers[entry.name] = entry.default
            continue
        try:
            answers[entry.name] = entry.check(value)
        except ValueError as exc:
            raise ConfigError(f"{origin} (interact profile entry of backend {backend}, {profile_name}) {exc}") from None
    return answers
