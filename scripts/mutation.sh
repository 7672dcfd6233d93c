#!/usr/bin/env bash
# Mutation testing of the measurement core with mutmut (docs/testing.md).
#
#   scripts/mutation.sh                      # the scope in pyproject.toml's [tool.mutmut]
#   scripts/mutation.sh contract/config/expr.py contract.cache   # only these modules (path or dotted name)
#   MUTATION_SAMPLE=300 MUTATION_SEED=1 scripts/mutation.sh common/stats.py   # a seeded random sample
#
# A mutant is a copy of the code with one small change (`<` for `<=`, a constant
# off by one, a string altered); it is *killed* when at least one of the fast unit
# tests fails against it, and *survives* otherwise. Score = killed / (killed +
# survived), where mutants no test reaches count as survived and timeouts as killed.
# Prints killed/survived/total and the score per module, lists the survivors, and
# exits 1 when the score of the whole run is below the threshold.
#
# Environment: MUTATION_THRESHOLD (percent, default 90), MUTATION_JOBS (parallel
# test processes, default the number of cores), MUTATION_STAGE (staging tree,
# default build/mutation), PYTHON (default .venv/bin/python), MUTATION_SAMPLE (run
# only this many mutants of the modules named, drawn at random without replacement;
# the score is then a sample's, printed with its exact 95 % binomial interval) and
# MUTATION_SEED (the draw's seed, default 1: the same seed and code draw the same mutants).
#
# Why a staging tree: mutmut names a mutant after its file path, and the code is
# imported rooted at inference/ (`contract.config.expr`, pytest's pythonpath). The stage
# holds src/ = a copy of inference/ (mutmut strips a leading `src.`), tests/ and
# pyproject.toml, so mutant names and imported module names agree; the working
# tree is never modified. The stage is rebuilt each run, so results never come
# from a stale cache.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-$REPO/.venv/bin/python}
THRESHOLD=${MUTATION_THRESHOLD:-90}
STAGE=${MUTATION_STAGE:-$REPO/build/mutation}
JOBS=${MUTATION_JOBS:-$(nproc)}
SAMPLE=${MUTATION_SAMPLE:-}
SEED=${MUTATION_SEED:-1}

if [ ! -x "$PY" ]; then
    echo "mutation.sh: no Python at $PY (run scripts/setup.sh, or set PYTHON)" >&2
    exit 2
fi
if ! "$PY" -c "import mutmut, hypothesis" 2>/dev/null; then
    echo "mutation.sh: installing mutmut and hypothesis into $("$PY" -c 'import sys; print(sys.prefix)')"
    "$PY" -m pip install -q "mutmut>=3.8,<4" "hypothesis>=6.100"
fi

# Module arguments -> dotted names (contract/config/expr.py, inference/contract/config/expr.py, contract.config.expr).
MODULES=()
for arg in "$@"; do
    name=${arg#inference/}
    name=${name%.py}
    name=${name//\//.}
    if [ ! -f "$REPO/inference/${name//.//}.py" ]; then
        echo "mutation.sh: no module $arg (expected e.g. contract/config/expr.py)" >&2
        exit 2
    fi
    MODULES+=("$name")
done
if [ -n "$SAMPLE" ]; then
    if ! [[ "$SAMPLE" =~ ^[1-9][0-9]*$ ]]; then
        echo "mutation.sh: MUTATION_SAMPLE=$SAMPLE is not a whole number of mutants >= 1" >&2
        exit 2
    fi
    if ! [[ "$SEED" =~ ^[0-9]+$ ]]; then
        echo "mutation.sh: MUTATION_SEED=$SEED is not a whole number >= 0" >&2
        exit 2
    fi
    if [ ${#MODULES[@]} -eq 0 ]; then
        echo "mutation.sh: MUTATION_SAMPLE needs the modules to sample named (e.g. common/stats.py)" >&2
        exit 2
    fi
fi

# Build the stage from the working tree as it is now.
case "$STAGE" in
    */build/mutation|/tmp/*) ;;
    *) echo "mutation.sh: refusing to delete MUTATION_STAGE=$STAGE (use a path ending in build/mutation or under /tmp)" >&2; exit 2 ;;
esac
rm -rf "$STAGE"
mkdir -p "$STAGE/src" "$STAGE/tests"
tar -C "$REPO/inference" --exclude=./onnxs --exclude=./result --exclude=__pycache__ -cf - . | tar -C "$STAGE/src" -xf -
tar -C "$REPO/tests" --exclude=__pycache__ --exclude=.hypothesis -cf - . | tar -C "$STAGE/tests" -xf -
cp "$REPO/pyproject.toml" "$STAGE/"
# mutmut runs the tests in mutants/, a copy of the stage with src/ mutated. Tests that
# find files next to the code (tests/../inference, as utils.results.summary finds a vendor's
# analysis module) look there: point that name at the mutated tree. pytest's pythonpath
# ("inference") then names the same directory as mutmut's own src/, never the originals.
mkdir -p "$STAGE/mutants"
ln -s src "$STAGE/mutants/inference"

# Every module asked for must be in the configured scope (mutmut only mutates those).
"$PY" - "$STAGE/pyproject.toml" "${MODULES[@]}" <<'EOF'
import sys, tomllib
cfg = tomllib.load(open(sys.argv[1], "rb"))["tool"]["mutmut"]
scope = {p.removeprefix("src/").removesuffix(".py").replace("/", ".") for p in cfg["only_mutate"]}
outside = [m for m in sys.argv[2:] if m not in scope]
if outside:
    sys.exit(f"mutation.sh: {', '.join(outside)} not in [tool.mutmut] only_mutate of pyproject.toml ({', '.join(sorted(scope))})")
EOF

PATTERNS=()
for name in "${MODULES[@]}"; do PATTERNS+=("$name.*"); done
if [ -n "$SAMPLE" ]; then
    # The mutants' names from mutmut's own generator, on the files the run mutates; a seeded
    # draw of SAMPLE of them (listed in sample.txt), which mutmut then runs and no other. Each is
    # asked for as NAME__mutmut*_K, a pattern only that mutant matches: mutmut looks a plain
    # name's function up among those some test reaches, and stops on one that none does.
    (cd "$STAGE" && "$PY" - "$SAMPLE" "$SEED" "${MODULES[@]}") <<'EOF'
import random, sys
from pathlib import Path
from mutmut.mutation.file_mutation import mutate_file_contents
from mutmut.utils.format_utils import get_mutant_name

size, seed, modules = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
names = []
for module in modules:
    path = Path("src", *module.split(".")).with_suffix(".py")
    names += [get_mutant_name(path, name) for name in mutate_file_contents(str(path), path.read_text()).mutant_names]
drawn = sorted(random.Random(seed).sample(sorted(names), min(size, len(names))))
Path("sample.txt").write_text("".join(f"{name}\n" for name in drawn))
print(f"mutation.sh: {len(drawn)} of {len(names)} mutants drawn at random (seed {seed})")
EOF
    mapfile -t PATTERNS < <(sed 's/__mutmut_\([0-9]*\)$/__mutmut*_\1/' "$STAGE/sample.txt")
fi

start=$(date +%s)
set +e
(cd "$STAGE" && nice -n 19 "$PY" -m mutmut run --max-children "$JOBS" "${PATTERNS[@]}" > mutmut.log 2>&1)
status=$?
set -e
elapsed=$(( $(date +%s) - start ))
if [ "$status" -ne 0 ]; then
    tail -n 40 "$STAGE/mutmut.log" >&2
    if grep -q "failed to collect stats\|Failed to run clean test" "$STAGE/mutmut.log"; then
        echo "mutation.sh: the selected tests fail on the unmutated code; fix them first" >&2
    fi
    echo "mutation.sh: mutmut failed (exit $status); full log in $STAGE/mutmut.log" >&2
    exit 2
fi

"$PY" - "$STAGE" "$THRESHOLD" "$elapsed" "${MODULES[@]}" <<'EOF'
"""Per-module killed/survived/total from mutmut's .meta files, and the verdict."""
import json, math, sys
from pathlib import Path

stage, threshold, elapsed, wanted = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
drawn = stage / "sample.txt"  # MUTATION_SAMPLE: only the mutants drawn count
sample = set(drawn.read_text().split()) if drawn.exists() else None


def binomial_interval(k: int, n: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 95 % interval of a proportion k of n, by bisection on the binomial tails."""

    def root(j: int, target: float) -> float:  # the p at which P(X <= j) = target (it decreases in p)
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            at_most = sum(math.comb(n, i) * mid**i * (1 - mid) ** (n - i) for i in range(j + 1))
            lo, hi = (mid, hi) if at_most > target else (lo, mid)
        return lo

    return 0.0 if k == 0 else root(k - 1, 0.975), 1.0 if k == n else root(k, 0.025)

KILLED = {1: "killed", 3: "killed", 37: "killed", 36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout"}
SURVIVED = {0: "survived", 5: "no tests", 33: "no tests"}
rows, survivors, odd = [], [], []
for meta in sorted((stage / "mutants" / "src").rglob("*.py.meta")):
    module = str(meta.relative_to(stage / "mutants" / "src"))[: -len(".py.meta")].replace("/", ".")
    if wanted and module not in wanted:
        continue
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    if sample is not None:
        codes = {key: code for key, code in codes.items() if key in sample}
        if not codes:
            continue
    killed = sum(1 for c in codes.values() if c in KILLED)
    survived = [k for k, c in codes.items() if c in SURVIVED]
    odd += [f"{k}: exit code {c}" for k, c in codes.items() if c not in KILLED and c not in SURVIVED]
    survivors += [f"{k} ({SURVIVED[codes[k]]})" for k in survived]
    rows.append((module, killed, len(survived), len(codes)))

if not rows:
    sys.exit("mutation.sh: no mutants were generated (check [tool.mutmut] in pyproject.toml)")
print(f"{'module':<28} {'killed':>7} {'survived':>9} {'total':>6} {'score':>7}")
for module, killed, survived, total in rows:
    score = 100.0 * killed / (killed + survived) if killed + survived else 100.0
    print(f"{module:<28} {killed:>7} {survived:>9} {total:>6} {score:>6.1f}%")
k, s, t = (sum(r[i] for r in rows) for i in (1, 2, 3))
score = 100.0 * k / (k + s) if k + s else 100.0
print(f"{'all':<28} {k:>7} {s:>9} {t:>6} {score:>6.1f}%   ({elapsed // 60}m{elapsed % 60:02d}s)")
if sample is not None:
    low, high = binomial_interval(k, k + s) if k + s else (0.0, 1.0)
    print(f"a random sample of {len(sample)} mutants: the score of all the modules' mutants is "
          f"{score:.1f}% with a 95% binomial interval of {100 * low:.1f}% to {100 * high:.1f}%")
if survivors:
    print("\nsurviving mutants (see one with: cd build/mutation && ../../.venv/bin/python -m mutmut show NAME):")
    print("\n".join(f"  {name}" for name in survivors))
if odd:
    print("\nmutants not run to a verdict (counted in total only):")
    print("\n".join(f"  {line}" for line in odd))
if score < threshold:
    print(f"\nFAIL: mutation score {score:.1f}% is below the threshold {threshold:g}%")
    sys.exit(1)
print(f"\nOK: mutation score {score:.1f}% >= {threshold:g}%")
EOF
