"""Write the bert case's evaluation set into a data directory.

    python3 -m benchmarks.bert.pytorch.prepare DATA_DIR

The set (``sentence_triples.tsv``, shipped beside this file) is 48 triples
written for this project: an anchor sentence, a paraphrase of it, and a
sentence that shares many of its words but not its meaning (negation, swapped
roles, opposite direction, other numbers or times). That is 96 sentence pairs,
half paraphrases and half not.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.data_cli import copy_shipped, writer_main

from .dataloader import DATA_FILE

SOURCE = Path(__file__).resolve().parent / DATA_FILE


def prepare_bert(out_dir: str | Path) -> Path:
    return copy_shipped(SOURCE, Path(out_dir) / DATA_FILE)


main = writer_main(prepare_bert, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
