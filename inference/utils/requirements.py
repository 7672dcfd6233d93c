"""Per-case Python requirements (spec §3.2.0).

A case that needs packages beyond the framework's own lists them in
``benchmarks/<case>/<framework>/requirements.txt``, one pip requirement per
line (``#`` comments allowed; pip options are not). Terms used here:

  requirement file   that file; a case without one needs nothing extra
  installed where the case runs
                     MODE local: this environment, by ``scripts/setup.sh``
                     (``python -m utils.requirements install``);
                     MODE docker: a layer on top of the vendor image, built by
                     ``utils/executors/images.py``, whose tag covers the files
  torch constraint   every install pins the torch already installed
                     (``torch==<version>``), so no case can replace it

``run.py`` checks the files of the cases it is about to run in MODE local
(``check_case_requirements``): a package that is missing or of another
version is one line naming the case, the package and the install command.

    cd inference && python3 -m utils.requirements check|install [case ...]
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import ConfigError
from common.layout import framework_dir

if TYPE_CHECKING:
    from packaging.requirements import Requirement

REQUIREMENTS_FILE = "requirements.txt"
# host.yaml's BACKEND_REQUIREMENTS: what an unmet pin of a ByteMLPerf backend folder does.
BACKEND_REQUIREMENTS = ("check", "warn", "skip")
INFERENCE_DIR = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Unmet:
    """One requirement line this environment does not satisfy; ``found`` is the installed version or None."""

    requirement: str
    name: str
    found: str | None
    # Not installed under its name, but its module comes from another distribution (tensorflow from tensorflow-cpu).
    provider: str | None = None

    def describe(self, who: str = "the case") -> str:
        if self.found is None and self.provider is not None:
            return (
                f"package '{self.name}' is not installed, but its module comes from {self.provider} (needs "
                f"{self.requirement})"
            )
        if self.found is None:
            return f"package '{self.name}' is not installed (needs {self.requirement})"
        return f"package '{self.name}' {self.found} is installed, but {who} needs {self.requirement}"


def requirements_path(perf_dir: str | Path, case: str, framework: str) -> Path | None:
    path = Path(perf_dir) / "benchmarks" / case / framework_dir(framework) / REQUIREMENTS_FILE
    return path if path.is_file() else None


def all_requirement_files(
    perf_dir: str | Path, framework: str | None = None, cases: list[str] | None = None
) -> list[Path]:
    """Every case's requirement file (optionally of one framework or some cases), sorted by path."""
    pattern = f"*/{framework_dir(framework) if framework else '*'}/{REQUIREMENTS_FILE}"
    files = sorted((Path(perf_dir) / "benchmarks").glob(pattern))
    if cases is not None:
        files = [f for f in files if f.parent.parent.name in cases]
    return files


def read_requirements(path: str | Path) -> list[tuple[str, Requirement]]:
    """``(line, packaging Requirement)`` for each requirement whose marker applies here."""
    from packaging.requirements import InvalidRequirement, Requirement

    entries: list[tuple[str, Requirement]] = []
    for number, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if line.startswith("-"):
            raise ConfigError(
                f"{path}:{number}: pip options ({line.split()[0]}) are not supported; list one package per line"
            )
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise ConfigError(f"{path}:{number}: not a pip requirement: {line!r} ({exc})") from None
        if requirement.marker is None or requirement.marker.evaluate():
            entries.append((line, requirement))
    return entries


def unmet_requirements(path: str | Path) -> list[Unmet]:
    unmet = []
    for line, requirement in read_requirements(path):
        try:
            found = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            unmet.append(Unmet(line, requirement.name, None, _provider(requirement.name)))
            continue
        if requirement.specifier and not requirement.specifier.contains(found, prereleases=True):
            unmet.append(Unmet(line, requirement.name, found))
    return unmet


def _provider(name: str) -> str | None:
    """``tensorflow-cpu 2.21.0`` for ``tensorflow``: the installed distribution that provides the
    module a missing distribution would have provided (a drop-in build of another name)."""
    module = name.lower().replace("-", "_").replace(".", "_")
    for dist in _module_providers().get(module, []):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def _module_providers() -> dict[str, list[str]]:
    return {module.lower(): dists for module, dists in metadata.packages_distributions().items()}


def install_hint(path: Path) -> str:
    return f"cd {INFERENCE_DIR} && python3 -m utils.requirements install  (or: pip install -r {path})"


def check_case_requirements(perf_dir: str | Path, case: str, framework: str) -> None:
    """Raise one ConfigError line for the first unmet requirement of this case; nothing when all are met."""
    path = requirements_path(perf_dir, case, framework)
    if path is None:
        return
    unmet = unmet_requirements(path)
    if unmet:
        more = f" (and {len(unmet) - 1} more)" if len(unmet) > 1 else ""
        relative = path.relative_to(Path(perf_dir)) if path.is_relative_to(Path(perf_dir)) else path
        raise ConfigError(
            f"case '{case}:{framework}': {unmet[0].describe()}{more}, listed in {relative}; install with: "
            f"{install_hint(path)}"
        )


def backend_requirements_path(perf_dir: str | Path, vendor: str, compiler: str | None) -> Path | None:
    """A ByteMLPerf backend folder's requirements.txt (inference_engine/<vendor>/<compiler>/), if the compiler is
    one."""
    if not compiler:
        return None
    path = Path(perf_dir) / "inference_engine" / vendor / compiler / REQUIREMENTS_FILE
    return path if path.is_file() else None


def check_backend_requirements(
    perf_dir: str | Path, vendor: str, compiler: str | None, policy: str = "check"
) -> list[str]:
    """A ByteMLPerf backend folder's requirements.txt against this environment (host.yaml's
    BACKEND_REQUIREMENTS): ``check``, one ConfigError line for the first unmet requirement;
    ``warn``, one WARNING line per unmet requirement with the version installed, and go on
    (returned too; each file is warned about once per process); ``skip``, not read at all.
    ByteMLPerf's own pins (tensorflow==2.4.0, numpy==1.19.2) install on no current Python:
    ``warn`` runs its unmodified code in an environment the user made compatible."""
    if policy == "skip":
        return []
    path = backend_requirements_path(perf_dir, vendor, compiler)
    unmet = unmet_requirements(path) if path is not None else []
    where = f"backend '{compiler}' (inference_engine/{vendor}/{compiler})"
    if unmet and policy != "warn":
        more = f" (and {len(unmet) - 1} more)" if len(unmet) > 1 else ""
        raise ConfigError(
            f"{where}: {unmet[0].describe('the backend')}{more}, listed in its requirements.txt; install with: pip "
            f"install -r {path}"
        )
    if path is None or not unmet or path in _WARNED:  # no requirements.txt: nothing unmet
        return []
    _WARNED.add(path)
    lines = [
        f"{where}: {item.describe('its requirements.txt')}; going on (BACKEND_REQUIREMENTS: warn)" for item in unmet
    ]
    from loguru import logger

    for line in lines:
        logger.warning(line)
    return lines


_WARNED: set[Path] = set()


def all_backend_requirement_files(perf_dir: str | Path, vendor: str) -> list[Path]:
    """Every ByteMLPerf backend folder's requirements.txt of one vendor (an image installs them all)."""
    folders = (Path(perf_dir) / "inference_engine" / vendor).glob(f"*/{REQUIREMENTS_FILE}")
    return sorted(
        p for p in folders if (p.parent / f"compile_backend_{p.parent.name.lower()}.py").is_file()
    )  # registry's rule


def torch_constraint() -> str | None:
    """``torch==<installed version>``, or None when torch is not installed."""
    try:
        return f"torch=={metadata.version('torch')}"
    except metadata.PackageNotFoundError:
        return None


def install_command(files: list[Path], constraints_file: Path, python: str = sys.executable) -> list[str]:
    command = [python, "-m", "pip", "install", "-c", str(constraints_file)]
    for path in files:
        command += ["-r", str(path)]
    return command


def install(files: list[Path], python: str = sys.executable) -> int:
    """pip-install the files into ``python``'s environment with the installed torch pinned; pip's exit status."""
    if not files:
        return 0
    with tempfile.TemporaryDirectory(prefix="inferperf-req-") as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text((torch_constraint() or "") + "\n", encoding="utf-8")
        return subprocess.run(install_command(files, constraints, python), check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check or install the cases' requirements.txt files.")
    parser.add_argument("action", choices=["check", "install"])
    parser.add_argument("cases", nargs="*", help="case names (default: every case)")
    parser.add_argument("--perf_dir", default=str(INFERENCE_DIR))
    parser.add_argument("--framework", default="pytorch")
    args = parser.parse_args(argv)
    files = all_requirement_files(args.perf_dir, args.framework, args.cases or None)
    if args.action == "install":
        for path in files:
            print(f"installing {path}")
        return install(files)
    status = 0
    for path in files:
        case = path.parent.parent.name
        try:
            check_case_requirements(args.perf_dir, case, args.framework)
            print(f"{case}:{args.framework}: requirements met")
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            status = 2
    return status


if __name__ == "__main__":
    sys.exit(main())
