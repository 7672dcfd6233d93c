"""Safe evaluation of the numeric expressions allowed in configs (e.g. ``2*512*0.33e9``).

YAML 1.1 reads ``4.12e9`` as a string, and FlagPerf configs write FLOPs as
products, so numbers may arrive as text. Only numeric literals, + - * / **
and parentheses are accepted; nothing is ever passed to ``eval``.
"""
from __future__ import annotations

import ast
import math
import operator

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_EXPONENT = 64


def parse_number(value: object) -> float:
    """Return ``value`` as a float, raising ValueError with a short reason."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a number, got {type(value).__name__}")
    text = value.strip()
    if not text or len(text) > 200:
        raise ValueError("expected a number or an arithmetic expression")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"{text!r} is not a number or arithmetic expression") from None
    try:
        result = float(_evaluate(tree.body, text))
    except (OverflowError, TypeError):  # 1e300**2; a complex power such as (-8)**0.5
        raise ValueError(f"{text!r} is out of range") from None
    if not math.isfinite(result):
        raise ValueError(f"{text!r} is not finite")
    return result


def _evaluate(node: ast.AST, text: str) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, text), _evaluate(node.right, text)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ValueError(f"exponent too large in {text!r}")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError(f"division by zero in {text!r}") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand, text))
    raise ValueError(f"{text!r} may only contain numbers, + - * / ** and parentheses")
