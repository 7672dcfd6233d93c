"""No test file imports from another test file: a helper or fixture that two test files use lives in
tests/infra/ (docs/testing.md).

A test file is a module of tests, not a library: its helpers change with its tests, importing it runs
its module-level set-up, and pytest may then collect the imported module's fixtures twice. This test
reads every Python file under tests/ (module level and inside functions) and fails on each import of a
``tests.test_*`` module, naming the file, the line and the module."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# importing file -> the test module it may still import, with the reason.
STILL_SHARED: dict[tuple[str, str], str] = {}


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return len(parts) >= 2 and parts[0] == "tests" and parts[1].startswith("test_")


def imported_test_modules(source: str, package: str = "tests") -> Iterator[tuple[int, str]]:
    """(line, module) of each import of a ``tests.test_*`` module in ``source``, a file of ``package``:
    ``import tests.test_x``, ``from tests.test_x import y``, ``from tests import test_x`` and the
    relative forms ``from .test_x import y`` and ``from . import test_x``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_test_module(alias.name):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if _is_test_module(base):
                yield node.lineno, base
            elif base == "tests":
                for alias in node.names:
                    if alias.name.startswith("test_"):
                        yield node.lineno, f"tests.{alias.name}"


def test_the_finder_sees_every_form_of_import():
    source = (
        "import os\n"
        "from tests.infra.clocks import x\n"
        "from tests.test_a import y\n"
        "def f():\n"
        "    import tests.test_b as b\n"
        "    from tests import test_c, conftest\n"
        "from .test_d import z\n"
        "from . import test_e\n"
        "from .infra import test_like_name\n"
        "from tests.conftest import run_py\n"
    )
    assert sorted(imported_test_modules(source)) == [
        (3, "tests.test_a"),
        (5, "tests.test_b"),
        (6, "tests.test_c"),
        (7, "tests.test_d"),
        (8, "tests.test_e"),
    ]
    # a file of tests/infra/: one dot is tests.infra, two dots are tests
    assert list(imported_test_modules("from ..test_f import g\n", "tests.infra")) == [(1, "tests.test_f")]
    assert not list(imported_test_modules("from .test_f import g\n", "tests.infra"))


def test_no_test_file_imports_from_another_test_file():
    found = []
    seen = set()
    for path in sorted(TESTS.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        package = ".".join(path.relative_to(ROOT).parent.parts)
        for line, module in imported_test_modules(path.read_text(), package):
            if (name, module) in STILL_SHARED:
                seen.add((name, module))
                continue
            found.append(f"{name}:{line} imports {module}: move what it takes to a module of tests/infra/")
    assert not found, "\n".join(found)
    assert seen == set(STILL_SHARED), f"no longer imported, drop from STILL_SHARED: {set(STILL_SHARED) - seen}"
