"""Every repository file a comment, docstring or doc names exists.

A comment that names a file which has moved sends the reader to nothing. This test reads the
prose of the repository (README.md, docs/*.md, scripts/, and the comments and docstrings of
inference/**/*.py and bench/*.py), picks out what looks like a repository path, and fails on
each one that resolves to no file, naming the path and the file and line that name it.

What counts as a path (so that prose and examples are not taken for one):
- at least one folder and a file with a known extension (`tools/plugins.py`, `docs/x.md`), or a
  folder path ending in "/" whose first part is one of the repository's own folders
  (`utils/results/report/`);
- not a URL, not absolute (`/tmp/x.py`), not home-relative, and no placeholder in it: `<case>`,
  `{a,b}`, `*`, `$VAR`, `...`, or an all-capitals folder such as `VENDOR/` or `DIR/`.
A path resolves against the repository root, `inference/`, or the naming file's own folder; else
it may be the tail of a repository file's path (`report/roofline.py` in `utils/results/`, as the
code beside it says it). "Repository" means what a clone has: git's tracked and not-ignored files,
not data/, onnxs/ or .venv/. Paths of other projects, of files a run creates, and the examples a
doc gives of a user's own file are listed in `NOT_IN_THE_REPOSITORY`, each with its reason.

Two more checks of the same prose: every relative Markdown link of README.md, docs/ and scripts/
resolves from its own folder, and a section quoted after a doc (`docs/measurement.md, "The stop
rule"`) is a heading of that doc.
"""

from __future__ import annotations

import ast
import functools
import io
import posixpath
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INFERENCE = ROOT / "inference"

_EXTENSIONS = "py|md|sh|yaml|yml|toml|txt|tsv|cfg|ini"
# Named on purpose although no such file is here: path -> why.
NOT_IN_THE_REPOSITORY = {
    "vllm/platforms/cpu.py": "vLLM's source",
    "vllm/v1/metrics/loggers.py": "vLLM's source",
    "python/sglang/srt/metrics/collector.py": "SGLang's source",
    "docs/source/reference/metrics.md": "a server project's documentation",
    "torch/onnx/_constants.py": "PyTorch's source",
    "doc/PERFORMANCE.md": "nccl-tests' documentation",
    "build/mutation/sample.txt": "written by scripts/mutation.sh",
    "src/contract/config/expr.py": "mutmut's copy of inference/, under build/mutation/",
    "inference/result/": "created by the first run",
    "inference/result/baselines/": "created by the first run that measures a peak",
    "inference/onnxs/": "the ONNX and engine cache, created by the first run",
    "configs/digits/vendor_config/bytecpu_configurations.yaml": "the example a ByteMLPerf vendor writes",
    "benchmarks/yolov5/pytorch/": "a missing case, in an example error message",
    "inference_engine/acme/fastpath.py": "a vendor's broken file, in an example error message",
}
# The folders a folder reference ("utils/results/report/") must start with to be checked:
# the repository's and inference/'s own, so "run<id>/" or "result/" of a run are left alone.
_KNOWN_ROOTS = frozenset(
    {
        "inference",
        "tests",
        "bench",
        "docs",
        "scripts",
        "tools",
        "utils",
        "common",
        "inference_engine",
        "benchmarks",
        "configs",
        "docker_images",
        "general_perf",
    }
)
_SEGMENT = r"[A-Za-z0-9_.\-]+"
_PATH = re.compile(
    rf"(?<![\w/.:~$<>{{}}*\-])"  # not inside a longer token, a URL, a placeholder or an absolute path
    rf"(?P<path>(?:{_SEGMENT}/)+(?:{_SEGMENT}\.(?:{_EXTENSIONS})\b|(?=[\s`'\")\],;:]|$)))"
    rf"(?![\w<>{{}}*$/])"  # and not followed by a placeholder or a further segment
)


def _candidates(text: str) -> Iterator[str]:
    for match in _PATH.finditer(text):
        path = match.group("path")
        parts = path.rstrip("/").split("/")
        if any(p in ("", ".", "..") and i > 0 for i, p in enumerate(parts)):
            continue
        if "..." in path or any(p.isupper() for p in parts[:-1]) or parts[-1].isupper():
            continue
        if path.endswith("/") and parts[0].lstrip(".") not in _KNOWN_ROOTS:
            continue
        if any(re.search(rf"\.(?:{_EXTENSIONS}|json)$", p) for p in parts[:-1]):
            continue  # "summary.json/summary.md": two files, not a folder
        if path.startswith("../"):
            path = path[3:]
        yield path


def _repository_paths() -> frozenset[str]:
    """Every file and folder a clone of the repository has, from the root (folders end in '/'):
    git's tracked and not-ignored files, so that what a run or setup creates (data/, onnxs/,
    result/, .venv/) neither hides a stale reference here nor is missing on a fresh clone."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout.decode()
        files = [name for name in listed.split("\0") if name and (ROOT / name).exists()]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: what is on disk
        skip = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", "build", "data", "onnxs", "result"}
        files = [
            p.relative_to(ROOT).as_posix()
            for p in ROOT.rglob("*")
            if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts)
        ]
    found = set(files)
    for name in files:
        parts = name.split("/")[:-1]
        found.update("/".join(parts[: i + 1]) + "/" for i in range(len(parts)))
    return frozenset(found)


def _exists(path: str, named_in: Path, known: frozenset[str]) -> bool:
    """Whether ``path`` names a repository file or folder, from the root, inference/, the naming
    file's folder, or as the tail of one's path."""
    if path in NOT_IN_THE_REPOSITORY:
        return True
    folder = named_in.parent.relative_to(ROOT).as_posix()
    for base in ("", "inference/", f"{folder}/"):
        candidate = posixpath.normpath(base + path)
        if candidate in known or candidate + "/" in known:
            return True
    return path in _tails(known)


@functools.cache
def _tails(known: frozenset[str]) -> frozenset[str]:
    """Every path of ``known`` without its first folders: utils/results/report/roofline.py gives
    results/report/roofline.py, report/roofline.py and roofline.py."""
    return frozenset(name[i + 1 :] for name in known for i, char in enumerate(name.rstrip("/")) if char == "/")


def _python_prose(source: str) -> Iterator[tuple[int, str]]:
    """The comments and docstrings of a Python file, with their first line numbers."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
    except (tokenize.TokenError, SyntaxError):
        return
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                value = body[0].value.value
                if isinstance(value, str):
                    for offset, line in enumerate(value.splitlines()):
                        yield body[0].lineno + offset, line


def _shell_prose(source: str) -> Iterator[tuple[int, str]]:
    """The comments of a shell script: the text after a '#' that starts a word."""
    for number, line in enumerate(source.splitlines(), 1):
        match = re.search(r"(?:^|\s)#(?!!)(.*)", line)
        if match:
            yield number, match.group(1)


def _text_lines(source: str) -> Iterator[tuple[int, str]]:
    yield from enumerate(source.splitlines(), 1)


def _prose_files() -> Iterator[tuple[Path, Iterator[tuple[int, str]]]]:
    yield ROOT / "README.md", _text_lines((ROOT / "README.md").read_text())
    for doc in sorted((ROOT / "docs").glob("*.md")):
        yield doc, _text_lines(doc.read_text())
    for path in sorted([*INFERENCE.rglob("*.py"), *(ROOT / "bench").glob("*.py")]):
        yield path, _python_prose(path.read_text())
    for script in sorted((ROOT / "scripts").iterdir()):
        if not script.is_file():
            continue
        text = script.read_text()
        if script.suffix == ".py":
            yield script, _python_prose(text)
        elif script.suffix == ".md":
            yield script, _text_lines(text)
        else:
            yield script, _shell_prose(text)


def _scan(files: Iterator[tuple[Path, Iterator[tuple[int, str]]]], find) -> list[str]:
    """'FILE:LINE what' for each finding ``find(file, line)`` yields on each line of ``files``."""
    return [
        f"{path.relative_to(ROOT)}:{number} {finding}"
        for path, lines in files
        for number, line in lines
        for finding in find(path, line)
    ]


def missing_references() -> list[str]:
    """One line per path named but absent: 'FILE:LINE names PATH, which does not exist'."""
    known = _repository_paths()

    def find(path: Path, line: str) -> Iterator[str]:
        for named in dict.fromkeys(_candidates(line)):
            if not _exists(named, path, known):
                yield f"names {named}, which does not exist"

    return _scan(_prose_files(), find)


def test_every_named_file_exists() -> None:
    missing = missing_references()
    bases = "the repository root, inference/, the naming file's folder, or as a repository path's tail"
    assert not missing, (
        f"{len(missing)} stale file reference(s), none found from {bases}; fix the path, or list a path that is"
        " named on purpose in NOT_IN_THE_REPOSITORY:\n" + "\n".join(missing)
    )


_LINK = re.compile(r"\]\((?!https?:|mailto:|#)(?P<target>[^)#\s]+)(?:#[^)]*)?\)")


def broken_links() -> list[str]:
    """One line per relative Markdown link, in README.md, docs/ or scripts/, whose target is absent."""
    known = _repository_paths()
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "scripts").glob("*.md"))]

    def find(doc: Path, line: str) -> Iterator[str]:
        for match in _LINK.finditer(line):
            target = posixpath.normpath(f"{doc.parent.relative_to(ROOT).as_posix()}/{match.group('target')}")
            if target not in known and target + "/" not in known:
                yield f"links to {match.group('target')}, which does not exist"

    return _scan(((doc, _text_lines(doc.read_text())) for doc in docs), find)


def test_every_relative_link_resolves() -> None:
    broken = broken_links()
    assert not broken, f"{len(broken)} broken link(s), resolved from the linking file's folder:\n" + "\n".join(broken)


# A doc and the section quoted after it: docs/measurement.md, "The stop rule" (or measurement.md inside docs/).
_SECTION = re.compile(r"(?P<doc>\b(?:docs/)?[a-z_]+\.md)`?\)?,? \"(?P<section>[A-Z][^\"]{2,80})\"")


def _headings(doc: Path) -> list[str]:
    """A doc's headings and run-in bold heads (**Change points.**), without Markdown marks, in lower case."""
    heads = []
    for line in doc.read_text().splitlines():
        if line.startswith("#"):
            heads.append(line.lstrip("#").strip())
        elif line.startswith("**"):
            heads.append(line[2:].split("**")[0])
    return [re.sub(r"[`*]", "", head).lower() for head in heads]


def missing_sections() -> list[str]:
    """One line per 'DOC, "Section"' whose doc has no heading containing that section's name."""
    known = {doc.name: _headings(doc) for doc in (ROOT / "docs").glob("*.md")}

    def find(_path: Path, line: str) -> Iterator[str]:
        for match in _SECTION.finditer(line):
            name = Path(match.group("doc")).name
            section = re.sub(r"[`*]", "", match.group("section")).lower()
            if name in known and not any(section in head for head in known[name]):
                yield f'names docs/{name}, "{match.group("section")}": no such heading'

    return _scan(_prose_files(), find)


def test_every_named_doc_section_exists() -> None:
    missing = missing_sections()
    assert not missing, f"{len(missing)} doc section(s) named but absent:\n" + "\n".join(missing)


def test_the_section_pattern() -> None:
    line = 'see docs/measurement.md, "The stop rule" and [x](history.md), "Change points"; key "repetitions"'
    assert [(m["doc"], m["section"]) for m in _SECTION.finditer(line)] == [
        ("docs/measurement.md", "The stop rule"),
        ("history.md", "Change points"),
    ]


def test_the_link_pattern_takes_relative_targets_only() -> None:
    line = "[a](docs/a.md) [b](b.md#part) [c](https://x/y.md) [d](#here) [e](../e.md)"
    assert [m.group("target") for m in _LINK.finditer(line)] == ["docs/a.md", "b.md", "../e.md"]


def test_the_pattern_finds_paths_and_leaves_prose_alone() -> None:
    line = (
        "see tools/config.py and `utils/results/report/`, [x](docs/x.md), docs/y.md:12, "
        "a/b.py::f; not https://h/a/b.py, /tmp/c/d.py, ~/e/f.py, docker_images/<vendor>/x.py, "
        "inference_engine/VENDOR/x.py, result/run12/, x/*.py, and/or, 1/2"
    )
    assert list(_candidates(line)) == [
        "tools/config.py",
        "utils/results/report/",
        "docs/x.md",
        "docs/y.md",
        "a/b.py",
    ]


def test_paths_resolve_against_the_root_inference_the_folder_and_tails() -> None:
    known = _repository_paths()
    assert _exists("tools/plugins.py", ROOT / "README.md", known)
    assert _exists("utils/results/report/", ROOT / "README.md", known)
    assert _exists("architecture.md", ROOT / "docs" / "index.md", known)
    assert _exists("../scripts/README.md", ROOT / "docs" / "index.md", known)
    assert _exists("report/roofline.py", ROOT / "docs" / "report.md", known)
    assert not _exists("tools/no_such_module.py", ROOT / "README.md", known)
    assert not _exists("results/roofline.py", ROOT / "docs" / "report.md", known)
    # what setup or a run creates is not the repository's: a fresh clone lacks it
    assert not _exists("data/digits/digits.npz", ROOT / "README.md", known)
    assert not _exists(".venv/bin/python", ROOT / "README.md", known)
