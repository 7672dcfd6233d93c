"""Safe evaluation of the numeric expressions allowed in configs (e.g. ``2*512*0.33e9``).

YAML 1.1 reads ``4.12e9`` as a string, and FlagPerf configs write FLOPs as
products, so numbers may arrive as text. Only numeric literals, + - * / **
and parentheses are accepted; nothing is ever passed to ``eval``.

Every step is bounded, so that no text can make this slow or big: the text
(200 characters) and its syntax tree (256 nodes) are bounded, an exponent may
not exceed 64 in magnitude, and every intermediate value must be a finite
number a float can hold: a power whose result would not is refused from the
logarithm of its base, before it is computed (``((9**64)**64)**64`` would
otherwise build a number of millions of digits).
"""

from __future__ import annotations

import ast
import math
import operator
import sys
from typing import Any, Callable

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_EXPONENT = 64
_MAX_TEXT = 200
_MAX_NODES = 256
_MAX_MAGNITUDE = sys.float_info.max
_MAX_LOG10 = math.log10(_MAX_MAGNITUDE)


def parse_number(value: object) -> float:
    """Return ``value`` as a finite float, raising ValueError with a short reason."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, (int, float)):
        return float(_bounded(value, value))
    if not isinstance(value, str):
        raise ValueError(f"expected a number, got {type(value).__name__}")
    text = value.strip()
    if not text or len(text) > _MAX_TEXT:
        raise ValueError("expected a number or an arithmetic expression")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: a NUL byte
        raise ValueError(f"{text!r} is not a number or arithmetic expression") from None
    if sum(1 for _ in ast.walk(tree)) > _MAX_NODES:
        raise ValueError(f"{text!r} has too many terms (more than {_MAX_NODES} syntax nodes)")
    return float(_evaluate(tree.body, text))


def _bounded(result: object, text: object) -> int | float:
    """``result`` if it is a finite real number a float can hold; ``text`` names it otherwise."""
    name = repr(text) if isinstance(text, str) else _number_name(text)
    if isinstance(result, complex):  # a fractional power of a negative number, e.g. (-8)**0.5
        raise ValueError(f"{name} is out of range")
    if isinstance(result, float):
        if not math.isfinite(result):
            raise ValueError(f"{name} is not finite")
    elif not isinstance(result, int) or abs(result) > _MAX_MAGNITUDE:  # an int too big for a float
        raise ValueError(f"{name} is out of range")
    return result


def _number_name(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    return repr(value)


def _evaluate(node: ast.AST, text: str) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return _bounded(node.value, text)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, text), _evaluate(node.right, text)
        if isinstance(node.op, ast.Pow):
            if abs(right) > _MAX_EXPONENT:
                raise ValueError(f"exponent too large in {text!r}")
            # |left ** right| = 10 ** (log10|left| * right): refuse before computing.
            if left != 0 and math.log10(abs(left)) * right > _MAX_LOG10:
                raise ValueError(f"{text!r} is out of range")
        try:
            return _bounded(_BINARY[type(node.op)](left, right), text)
        except ZeroDivisionError:
            raise ValueError(f"division by zero in {text!r}") from None
        except OverflowError:  # float arithmetic beyond the float range, e.g. 1e-300**-2
            raise ValueError(f"{text!r} is out of range") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand, text))
    raise ValueError(f"{text!r} may only contain numbers, + - * / ** and parentheses")
