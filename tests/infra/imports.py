"""The import graph under inference/, read from the syntax tree (no module is imported), and the
house's figures: arrows back up the house, import loops, lines of code.

``python -m tests.infra.imports [INFERENCE_DIR]`` prints the figures (docs/architecture.md "The
house") of this tree's inference/, or of another's (an older commit's, from ``git archive``).

Every import counts: module level, in functions and in ``if TYPE_CHECKING:`` blocks, and a load
by name: ``importlib.import_module("a.b")`` of a string literal, or of a name formatted from the
loading module's declared table, ``DYNAMIC_IMPORTS[KEY].format(...)``, which is followed to every
module the pattern matches (a ``{placeholder}`` is one dotted part). Any other name built at run
time is an undeclared load (``undeclared_loads``); the graph follows an f-string's pattern the
same way, so a loop through one still shows.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

INFERENCE = Path(__file__).resolve().parents[2] / "inference"
TABLE = "DYNAMIC_IMPORTS"

# The house, lowest floor first. A static import may go down or stay in its own room, never up;
# rooms on one floor are kept apart (tools/ and utils/ meet only below them; a plug-in reaches
# another plug-in's room only through a declared load). A plug-in is loaded by the floor or the
# framework through a declared table, which is no static arrow.
FLOORS: dict[str, int] = {
    "common": 0,
    "contract": 1,
    "tools": 2,
    "utils": 2,
    "inference_engine": 3,
    "benchmarks": 3,
    "general_perf": 3,
    "docker_images": 3,
    "run": 4,
    "run_inference": 4,
}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_import_module(func: ast.AST) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module"
    )


def _declared_table(tree: ast.AST, files: dict[str, Path] | None = None) -> dict[str, str]:
    """The module's ``DYNAMIC_IMPORTS = {...}`` (a literal dict of key -> module pattern), or the one
    it imports by ``from M import DYNAMIC_IMPORTS`` (M one of ``files``), or {}."""
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name == TABLE for a in node.names):
            if files and node.module in files:
                return _declared_table(ast.parse(files[node.module].read_text(encoding="utf-8")))

        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == TABLE and node.value is not None:  # type: ignore[union-attr]
            return dict(ast.literal_eval(node.value))  # type: ignore[union-attr]
    return {}


def _table_key(arg: ast.AST) -> str | None:
    """KEY of ``DYNAMIC_IMPORTS[KEY].format(...)``; None for any other expression."""
    if (
        isinstance(arg, ast.Call)
        and isinstance(arg.func, ast.Attribute)
        and arg.func.attr == "format"
        and isinstance(arg.func.value, ast.Subscript)
        and isinstance(arg.func.value.value, ast.Name)
        and arg.func.value.value.id == TABLE
        and isinstance(arg.func.value.slice, ast.Constant)
    ):
        return str(arg.func.value.slice.value)
    return None


def _f_string_pattern(arg: ast.AST) -> str | None:
    """An f-string's pattern, each formatted part a ``{}`` placeholder; None for anything else."""
    if not isinstance(arg, ast.JoinedStr):
        return None
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in arg.values)  # type: ignore[misc]


def dynamic_loads(tree: ast.AST, files: dict[str, Path] | None = None) -> list[tuple[ast.Call, str | None, str]]:
    """(call, the pattern or literal it loads, how: 'literal', 'declared', 'f-string' or
    'undeclared') for every ``import_module`` call of a module."""
    table = _declared_table(tree, files)
    found: list[tuple[ast.Call, str | None, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args and _is_import_module(node.func)):
            continue
        arg = node.args[0]
        key = _table_key(arg)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found.append((node, arg.value, "literal"))
        elif key is not None and key in table:
            found.append((node, table[key], "declared"))
        elif (pattern := _f_string_pattern(arg)) is not None:
            found.append((node, pattern, "f-string"))
        else:
            found.append((node, None, "undeclared"))
    return found


def _imports(tree: ast.AST, package: str, files: dict[str, Path] | None = None) -> list[tuple[str, bool, bool]]:
    """(imported name or pattern, at module level, static) for every import of a module.
    ``from X import Y`` gives ``X.Y`` (a submodule, or a name the caller resolves to X);
    relative imports are resolved. A load by name is not static; its pattern keeps ``{...}``."""
    top = {id(node) for node in getattr(tree, "body", [])}
    top_calls = {
        id(call)
        for node in getattr(tree, "body", [])
        if isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign))
        for call in ast.walk(node)
    }
    found = [
        (pattern, id(call) in top_calls, how == "literal")
        for call, pattern, how in dynamic_loads(tree, files)
        if pattern is not None
    ]
    for node in ast.walk(tree):
        at_top = id(node) in top
        if isinstance(node, ast.Import):
            found += [(alias.name, at_top, True) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found += [(f"{base}.{alias.name}", at_top, True) for alias in node.names]
    return found


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"\{[^}]*\}", pattern)
    return re.compile(r"[A-Za-z0-9_]+".join(re.escape(p) for p in parts) + r"$")


def module_files(root: Path = INFERENCE) -> dict[str, Path]:
    return {module_name(p, root): p for p in root.rglob("*.py") if "__pycache__" not in p.parts}


def import_graph(
    root: Path = INFERENCE, module_level_only: bool = False, static_only: bool = False
) -> dict[str, set[str]]:
    """Module -> the modules under ``root`` it imports (the deepest module a dotted name names;
    a load by pattern -> every module it matches)."""
    files = module_files(root)

    def resolve(name: str) -> set[str]:
        if "{" in name:
            regex = _pattern_regex(name)
            return {m for m in files if regex.match(m)}
        while name and name not in files:
            name = name.rpartition(".")[0]
        return {name} if name else set()

    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported: set[str] = set()
        for target, at_top, static in _imports(ast.parse(path.read_text(encoding="utf-8")), package, files):
            if (at_top or not module_level_only) and (static or not static_only):
                imported |= resolve(target)
        graph[name] = {m for m in imported if m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as ``[a, b, ..., a]``, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            following = next(stack[-1], None)
            if following is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(following) == 1:
                return path[path.index(following) :] + [following]
            elif following not in state:
                state[following] = 1
                path.append(following)
                stack.append(iter(sorted(graph.get(following, ()))))
    return None


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's loops: each strongly connected set of two or more modules (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, following = work[-1]
            child = next(following, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def room(module: str) -> str:
    return module.split(".")[0]


def back_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Static imports that go up the house (FLOORS) or across to another room on the same floor."""
    arrows = []
    for source, targets in graph.items():
        for target in targets:
            a, b = room(source), room(target)
            if a != b and a in FLOORS and b in FLOORS and FLOORS[b] >= FLOORS[a]:
                arrows.append((source, target))
    return sorted(arrows)


def plug_in_reach(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Static imports from a plug-in (an engine or a case) into the framework's rooms (tools/,
    utils/), which a plug-in never needs: what it uses of the framework is on the floor."""
    return sorted(
        (source, target)
        for source, targets in graph.items()
        if room(source) in ("inference_engine", "benchmarks")
        for target in targets
        if room(target) in ("tools", "utils")
    )


def undeclared_loads(root: Path = INFERENCE) -> list[str]:
    """``path:line`` of every ``import_module`` of a name built at run time outside a declared table."""
    found = []
    files = module_files(root)
    for path in sorted(files.values()):
        for call, _, how in dynamic_loads(ast.parse(path.read_text(encoding="utf-8")), files):
            if how in ("f-string", "undeclared"):
                found.append(f"{path.relative_to(root)}:{call.lineno}")
    return found


def lines_of_code(root: Path = INFERENCE) -> int:
    return sum(len(p.read_text(encoding="utf-8").splitlines()) for p in module_files(root).values())


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else INFERENCE
    static = import_graph(root, static_only=True)
    every = import_graph(root)
    arrows = back_arrows(static)
    reach = plug_in_reach(static)
    found = loops(every)
    undeclared = undeclared_loads(root)
    print(f"arrows back up the house: {len(arrows)}")
    for source, target in arrows:
        print(f"  {source} -> {target}")
    print(f"plug-in imports of tools/ or utils/: {len(reach)} (modules: {len({s for s, _ in reach})})")
    for source, target in reach:
        print(f"  {source} -> {target}")
    print(f"loops (static imports and loads by name): {len(found)}")
    for members in found:
        print("  " + ", ".join(members))
    print(f"loads by a name built at run time, undeclared: {len(undeclared)}")
    for where in undeclared:
        print(f"  {where}")
    print(f"lines under inference/ (*.py): {lines_of_code(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
