"""A plug-in's declarations, read from its file's syntax tree: the host never imports a plug-in.

A declaration is a module-level assignment of a literal, ``NAME = "value"`` (or ``NAME: str = "value"``):
``MONITOR_PROTOCOL`` in a vendor's monitor (``common/monitor_protocol.py``), ``IMAGE`` in an engine
module (``contract/registry.py::engine_facts``).
"""

from __future__ import annotations

import ast


def declared(tree: ast.Module, name: str) -> object | None:
    """The value of a module-level ``name = <literal>`` in ``tree``, or None when there is none; a
    value that is no literal reads as ``"<its source>"`` (which no check accepts)."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            try:
                return ast.literal_eval(value)
            except ValueError:
                return f"<{ast.unparse(value)}>"
    return None
