"""Write the bert case's evaluation set into a data directory.

    python3 -m benchmarks.bert.pytorch.prepare DATA_DIR

The set (``sentence_triples.tsv``, shipped beside this file) is 48 triples
written for this project: an anchor sentence, a paraphrase of it, and a
sentence that shares many of its words but not its meaning (negation, swapped
roles, opposite direction, other numbers or times). That is 96 sentence pairs,
half paraphrases and half not.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmarks.data_cli import out_dir_args

from .dataloader import DATA_FILE

SOURCE = Path(__file__).resolve().parent / DATA_FILE


def prepare_bert(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / DATA_FILE
    shutil.copyfile(SOURCE, target)
    return target


def main(argv: list[str] | None = None) -> None:
    args = out_dir_args(__doc__.splitlines()[0], argv)
    print(f"wrote {prepare_bert(args.out_dir)}")


if __name__ == "__main__":
    main()
