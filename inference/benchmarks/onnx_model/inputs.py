"""What the generic case feeds a model: each input's per-sample shape and how its values are drawn.

Shapes. Dimension 0 of every input is the batch axis: each batch size of the run
(``batch_size``, ``batch_sizes``), or the model's own size when it fixes one. Every
other dynamic dimension (a symbol such as ``sequence``, or unknown) takes, first
found: the size given by ``input_shapes`` (trtexec's ``--shapes``:
``input_ids:Nx128,attention_mask:Nx128``), the model-zoo JSON's ``input_shape``,
the size another input's same symbol got, or a default: 224 for a spatial axis
and 3 for the channel axis of a floating input of rank 4 or 5 (channels first,
NCHW, unless the zoo's ``layout`` says NHWC or only the last axis is fixed), 128
for anything else (a sequence).

Values (seeded, distinct per sample):
  floating                     uniform in [-1, 1)
  name contains "mask"         ones (an attention mask: attend everywhere), or zeros when
                               the name also contains "pad" (a padding mask: nothing padded)
  bool                         false
  "token_type" or "segment"    zeros (one segment)
  "position"                   0, 1, 2, ... along the last axis (below the table's rows)
  indexes an embedding table   token ids in [0, rows of the table)
  uint8 / int8                 the whole range
  any other integer            0 or 1 (valid for any index or count of at least 2)
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from common.errors import ConfigError, shown

from .model_file import FLOATING, SUPPORTED_TYPES, GraphInput, ModelSignature
from .model_zoo import ZooEntry

SPATIAL_DEFAULT = 224
CHANNEL_DEFAULT = 3
OTHER_DEFAULT = 128
MAX_DIM = 1 << 20  # elements along one axis
BATCH_WORDS = ("N", "n", "?")
SHAPES_SYNTAX = (
    "NAME:DxD...[,NAME:DxD...] with N (or any size) for the batch axis, e.g. input_ids:Nx128,attention_mask:Nx128"
)
_DIM = re.compile(r"^\d{1,9}$")
# An input's shape as given: (dims with None for the batch axis, where for errors, what for the log).
Explicit = tuple[list[int | None], str, str]


@dataclass
class InputPlan:
    """One input as the data loader makes it; JSON-able (it travels in the config as ``model_inputs``)."""

    name: str
    dtype: str
    sample_shape: list[int]  # without the batch axis
    fill: str  # uniform | integers | ones | zeros | positions
    low: float = 0
    high: float | None = None  # exclusive bound of uniform, integers, positions
    static_batch: int | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "InputPlan":
        return cls(**data)

    def describe(self) -> str:
        batch = "N" if self.static_batch is None else str(self.static_batch)
        shape = "x".join([batch, *map(str, self.sample_shape)])
        values = f"{self.fill} in [{self.low:g}, {self.high:g})" if self.fill in ("uniform", "integers") else self.fill
        if self.fill == "positions":
            values = "positions 0, 1, 2, ..." + (f" (mod {self.high:g})" if self.high else "")
        return f"input '{self.name}' {self.dtype} {shape}: {values}" + (
            f" ({'; '.join(self.notes)})" if self.notes else ""
        )


def parse_input_shapes(value: Any, where: str) -> dict[str, list[int | None]]:
    """``"a:Nx128,b:Nx3x224x224"`` -> ``{"a": [None, 128], "b": [None, 3, 224, 224]}`` (None: the batch axis)."""
    if value is None:
        return {}

    def fail(reason: str) -> ConfigError:
        return ConfigError(f"{where}: key 'input_shapes' {reason}; expected {SHAPES_SYNTAX}")

    if not isinstance(value, str) or not value.strip():
        raise fail(f"must be a string, got {shown(value)}")
    shapes: dict[str, list[int | None]] = {}
    for part in value.split(","):
        name, sep, text = part.strip().rpartition(":")  # a name may hold ':' (TensorFlow's "x:0")
        if not sep or not name or not text:
            raise fail(f"entry {shown(part.strip())} is not NAME:DxD...")
        if name in shapes:
            raise fail(f"names input {name!r} twice")
        words = text.split("x")
        dims: list[int | None] = []
        for index, word in enumerate(words):
            if index == 0 and word in BATCH_WORDS:
                dims.append(None)
            elif _DIM.match(word) and 0 < int(word) <= MAX_DIM:
                dims.append(int(word))
            else:
                raise fail(f"entry {shown(part.strip())}: {word!r} is not a size from 1 to {MAX_DIM}")
        shapes[name] = dims
    return shapes


def plan_inputs(
    signature: ModelSignature,
    zoo: ZooEntry | None,
    given: dict[str, list[int | None]],
    given_where: str = "key 'input_shapes'",
) -> tuple[list[InputPlan], list[str]]:
    """Each model input's plan, and warnings (where the zoo JSON disagrees with the model);
    ``given_where`` names where ``given`` (input_shapes) came from in errors."""
    names = [i.name for i in signature.inputs]
    zoo_shapes = zoo.input_shape if zoo else {}
    for source, wanted in ((given_where, given), (f"{zoo.path if zoo else ''}: key 'input_shape'", zoo_shapes)):
        stray = [name for name in wanted if name not in names]
        if stray:
            raise ConfigError(
                f"{source} names {stray[0]!r}, which is not an input of {signature.path.name} (its inputs: "
                f"{', '.join(names)})"
            )
    warnings = []
    explicit: dict[str, Explicit] = {}
    for item in signature.inputs:
        _check_type(item, signature)
        if zoo and item.name in zoo.input_type and zoo.input_type[item.name] != item.type_name:
            warnings.append(
                f"{zoo.path.name} says input '{item.name}' is {zoo.input_type[item.name]}; the model declares "
                f"{item.type_name}, which is used"
            )
        if item.name in given:
            explicit[item.name] = (given[item.name], given_where, "input_shapes")
        elif item.name in zoo_shapes:
            explicit[item.name] = (
                [None, *zoo_shapes[item.name][1:]],
                f"{zoo.path}: key 'input_shape'",
                f"{zoo.path.name} input_shape",
            )
        _check_rank(item, explicit.get(item.name), signature)
    symbols = _given_symbols(signature.inputs, explicit)
    layout = zoo.layout if zoo else None
    plans = [_plan(item, explicit.get(item.name), symbols, layout) for item in signature.inputs]
    return plans, warnings


def _check_type(item: GraphInput, signature: ModelSignature) -> None:
    if not item.supported:
        known = ", ".join(sorted(set(SUPPORTED_TYPES.values())))
        raise ConfigError(
            f"{signature.path}: input '{item.name}' has type {item.type_name}, which cannot be synthesised (numeric "
            f"tensors only: {known})"
        )


def _check_rank(item: GraphInput, explicit: Explicit | None, signature: ModelSignature) -> None:
    if item.dims is None:
        if explicit is None:
            raise ConfigError(
                f"{signature.path}: input '{item.name}' declares no shape; give it with --set "
                f"input_shapes={item.name}:Nx... (key 'input_shapes')"
            )
        item.dims = [None] * len(explicit[0])  # every axis as the user gave it
    if not item.dims:
        raise ConfigError(
            f"{signature.path}: input '{item.name}' is a scalar (rank 0), which cannot be batched along axis 0"
        )
    if explicit is None:
        return
    dims, where = explicit[0], explicit[1]
    if len(dims) != len(item.dims):
        raise ConfigError(
            f"{where}: input '{item.name}' has {len(item.dims)} dimensions {item.shape_text()} (batch axis included), "
            f"not {len(dims)}"
        )
    for axis, (declared, size) in enumerate(zip(item.dims, dims)):
        if axis and isinstance(declared, int) and size != declared:
            raise ConfigError(
                f"{where}: input '{item.name}' axis {axis} is given as {size}, but the model fixes it at {declared} "
                f"{item.shape_text()}"
            )


def _given_symbols(inputs: list[GraphInput], explicit: dict[str, Explicit]) -> dict[str, tuple[int, str]]:
    """Symbol -> (size, input that gave it), from the explicit shapes; two different sizes for one symbol is an
    error."""
    symbols: dict[str, tuple[int, str]] = {}
    for item in inputs:
        if item.name not in explicit:
            continue
        for axis, declared in enumerate(item.dims or []):
            size = explicit[item.name][0][axis]
            if axis == 0 or not isinstance(declared, str) or size is None:
                continue
            if declared in symbols and symbols[declared][0] != size:
                other = symbols[declared][1]
                raise ConfigError(
                    f"{explicit[item.name][1]}: dimension '{declared}' is {size} for input '{item.name}' but "
                    f"{symbols[declared][0]} for input '{other}'"
                )
            symbols[declared] = (size, item.name)
    return symbols


def _plan(
    item: GraphInput, explicit: Explicit | None, symbols: dict[str, tuple[int, str]], layout: str | None
) -> InputPlan:
    dims = item.dims or []
    notes: list[str] = []
    shape: list[int] = []
    for axis in range(1, len(dims)):
        declared = dims[axis]
        if isinstance(declared, int):
            shape.append(declared)
            continue
        label = f"'{declared}'" if declared else f"axis {axis}"
        if explicit is not None:
            size = explicit[0][axis]
            notes.append(f"{label}={size} from {explicit[2]}")
        elif declared and declared in symbols:
            size, source = symbols[declared]
            notes.append(f"{label}={size} as for input '{source}'" if source != item.name else f"{label}={size}")
        else:
            size, why = _default_size(item, axis, layout)
            notes.append(f"{label}={size}: default for {why}")
            if declared:
                symbols[declared] = (size, item.name)
        shape.append(int(size))
    static_batch = dims[0] if isinstance(dims[0], int) else None
    fill, low, high, why = _fill(item)
    if why:
        notes.append(why)
    return InputPlan(item.name, item.type_name, shape, fill, low, high, static_batch, notes)


def _default_size(item: GraphInput, axis: int, layout: str | None) -> tuple[int, str]:
    dims = item.dims or []
    if item.type_name in FLOATING and len(dims) in (4, 5):
        if layout is None:  # channels last when only the last axis is fixed, else first (NCHW)
            last = isinstance(dims[-1], int) and not isinstance(dims[1], int)
            layout = ("NHWC" if len(dims) == 4 else "NDHWC") if last else ("NCHW" if len(dims) == 4 else "NCDHW")
        channel = len(dims) - 1 if layout in ("NHWC", "NDHWC") else 1
        if axis == channel:
            return CHANNEL_DEFAULT, f"the channel axis ({layout})"
        return SPATIAL_DEFAULT, f"a spatial axis ({layout})"
    return OTHER_DEFAULT, "a dynamic axis"


def _fill(item: GraphInput) -> tuple[str, float, float | None, str | None]:
    """(fill, low, high, why) for an input, by the rules of the module docstring."""
    name, dtype = item.name.lower(), item.type_name
    if dtype in FLOATING:
        return "uniform", -1.0, 1.0, None
    if "mask" in name:
        return (
            ("zeros", 0, None, "a padding mask: nothing padded")
            if "pad" in name
            else ("ones", 0, None, "a mask: attend everywhere")
        )
    if dtype == "bool":
        return "zeros", 0, None, None
    if "token_type" in name or "segment" in name:
        return "zeros", 0, None, "one segment"
    if "position" in name:
        return "positions", 0, item.vocabulary, None
    if item.vocabulary:
        return "integers", 0, item.vocabulary, f"token ids below the {item.vocabulary} rows of {item.vocabulary_source}"
    if dtype == "uint8":
        return "integers", 0, 256, None
    if dtype == "int8":
        return "integers", -128, 128, None
    return "integers", 0, 2, "no table found that it indexes: a safe range"
