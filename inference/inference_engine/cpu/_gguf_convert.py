"""Convert a Hugging Face Llama checkpoint to GGUF with llama.cpp's own converter, then prove the result's
tokenizer. Run as a script by ``llamacpp.py::InferModel.build``, in the Python that has llama.cpp
(``llamacpp_python``: llama_cpp, torch, transformers, sentencepiece) and never imported by the framework:

    PYTHON _gguf_convert.py LLAMA_CPP_SOURCE HF_DIR OUT.gguf

LLAMA_CPP_SOURCE is a llama.cpp source folder (``convert_hf_to_gguf.py``, ``conversion/``,
``gguf-py/``: llama-cpp-python's sdist holds one under ``vendor/llama.cpp``). The converter runs as
``convert_hf_to_gguf.py HF_DIR --outfile OUT.gguf --outtype f32``, with one exception. It names a BPE
tokenizer's pre-tokenizer by a hash of the ids it gives for a test string, and refuses a hash it does
not list ("BPE pre-tokenizer was not recognized"); its documented remedy, convert_hf_to_gguf_update.py,
downloads the listed tokenizers from Hugging Face, which cannot be reached here. The hash depends on
the vocabulary too, so a tokenizer trained for the case (benchmarks/llama/pytorch/weights.py) is never
listed although its pre-tokenizer is GPT-2's. So, only when the converter refuses the hash and the
checkpoint's tokenizer.json declares exactly GPT-2's pre-tokenizer (a byte-level BPE, ``ByteLevel``
with ``use_regex`` and no prefix space, no normalizer), the pre-tokenizer is written as ``gpt-2``. Any
other unknown tokenizer stays refused, in one line. Then the GGUF's vocabulary is checked in llama.cpp
itself: the checkpoint's tokenizer and llama.cpp must give the same ids for every line of TEXT below
(words, numbers, spaces, tabs, new lines, accents, CJK, an emoji), or the file is removed and the
conversion fails.
The last line on stderr is the reason of any failure; exit 0 means OUT.gguf is whole and checked.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GPT2_PRE = "gpt-2"  # the converter's name for GPT-2's pre-tokenizer (llama.cpp: LLAMA_VOCAB_PRE_TYPE_GPT2)
TEXT = [
    "The time to first token is the wait before the first word appears.",
    "  two  spaces,\ttabs\tand 3 numbers 12345 and 3.14 -- dashes!! 'quotes' don't I've we'll",
    "naïve café, 東京, emoji 🦙 and symbols <>{}[]()#@$%^&*",
    "\n\nnew lines\n and trailing spaces   ",
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n 3 33 333 3333 33333 3.3 3..3",
    ' 3...3 ------======= ```````""""......!!!!!!??????',
]


def declares_gpt2_pre_tokenizer(hf_dir: Path) -> bool:
    """tokenizer.json is a byte-level BPE with GPT-2's pre-tokenizer and no normalizer."""
    try:
        spec = json.loads((hf_dir / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    pre = spec.get("pre_tokenizer") or {}
    return (
        (spec.get("model") or {}).get("type") == "BPE"
        and spec.get("normalizer") is None
        and pre.get("type") == "ByteLevel"
        and pre.get("use_regex", True) is True
        and pre.get("add_prefix_space", False) is False
    )


def convert(source: Path, hf_dir: Path, out: Path) -> None:
    sys.path[:0] = [str(source), str(source / "gguf-py")]
    sys.argv = ["convert_hf_to_gguf.py", str(hf_dir), "--outfile", str(out), "--outtype", "f32"]
    import convert_hf_to_gguf
    from conversion.base import TextModel

    listed = TextModel.get_vocab_base_pre
    gpt2 = declares_gpt2_pre_tokenizer(hf_dir)

    def vocab_base_pre(self, tokenizer) -> str:
        try:
            return listed(self, tokenizer)
        except NotImplementedError:
            if not gpt2:
                raise SystemExit(
                    f"{hf_dir}: llama.cpp's converter does not know this tokenizer's BPE pre-tokenizer, and its "
                    "tokenizer.json does not declare GPT-2's (ByteLevel, use_regex, no prefix space, no normalizer)"
                ) from None
            print(
                f"{hf_dir}: pre-tokenizer not listed by hash; tokenizer.json declares GPT-2's: 'gpt-2'", file=sys.stderr
            )
            return GPT2_PRE

    TextModel.get_vocab_base_pre = vocab_base_pre  # type: ignore[method-assign]
    convert_hf_to_gguf.main()


def check_vocabulary(hf_dir: Path, out: Path) -> None:
    """The checkpoint's tokenizer and the GGUF's, in llama.cpp, give the same ids for every probe line."""
    import llama_cpp
    from transformers import AutoTokenizer

    probe = TEXT
    reference = AutoTokenizer.from_pretrained(str(hf_dir), local_files_only=True)
    model = llama_cpp.Llama(str(out), vocab_only=True, verbose=False)
    for line in probe:
        expected = reference.encode(line, add_special_tokens=False)
        got = model.tokenize(line.encode("utf-8"), add_bos=False, special=False)
        if list(got) != list(expected):
            out.unlink(missing_ok=True)
            raise SystemExit(
                f"{out.name}: llama.cpp tokenises {line[:40]!r} as {list(got)[:8]}..., the checkpoint's tokenizer as "
                f"{list(expected)[:8]}...: the GGUF's vocabulary does not match (file removed)"
            )
    print(f"vocabulary checked: {len(probe)} lines tokenise identically in llama.cpp and transformers", file=sys.stderr)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: _gguf_convert.py LLAMA_CPP_SOURCE HF_DIR OUT.gguf", file=sys.stderr)
        return 2
    source, hf_dir, out = (Path(a) for a in argv)
    if not (source / "convert_hf_to_gguf.py").is_file() or not (source / "gguf-py").is_dir():
        print(f"{source}: not a llama.cpp source folder (convert_hf_to_gguf.py and gguf-py/)", file=sys.stderr)
        return 2
    convert(source, hf_dir, out)
    if not out.is_file():
        print(f"{out}: the converter wrote no file", file=sys.stderr)
        return 1
    check_vocabulary(hf_dir, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
