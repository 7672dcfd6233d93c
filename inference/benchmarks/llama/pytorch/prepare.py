"""Write the llama case's data directory: a small MMLU-style set in FlagPerf's layout.

    python3 -m benchmarks.llama.pytorch.prepare DATA_DIR

The set (``mmlu_sample/``, shipped beside this file) is 12 questions written for
this project, 6 arithmetic and 6 geography, with 5 dev examples per subject for
the shots: enough to run the MMLU scoring path end to end, far too few for an
accuracy figure worth comparing. Put the real MMLU CSVs (``dev/``, ``test/``)
under ``DATA_DIR/mmlu`` instead for that.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.data_cli import copy_shipped, writer_main

SOURCE = Path(__file__).resolve().parent / "mmlu_sample"


def prepare_llama(out_dir: str | Path, mmlu_dir: str = "mmlu") -> Path:
    return copy_shipped(SOURCE, Path(out_dir) / mmlu_dir)


main = writer_main(prepare_llama, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
