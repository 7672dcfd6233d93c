"""Greedy token ids from llama.cpp on a GGUF, token ids in and out: the numeric check's source for
``compiler: llamacpp`` (``llamacpp.py``), because llama-cpp-python's server takes string prompts only
and answers text, never ids. Run as a script in the Python that has llama_cpp (the server's own
library and build, on the same file), never imported by the framework:

    PYTHON _llamacpp_greedy.py MODEL.gguf N_CTX SEED THREADS

Then one JSON request per stdin line, ``{"ids": [...], "n": N, "banned": [...]}``, one answer per
stdout line, ``{"tokens": [...]}``: the prompt is evaluated as given (no BOS added), and each of the N
tokens is the argmax of the logits with the ``banned`` ids (end of sequence) excluded, fed back before
the next. No sampler chain, penalty or temperature is involved. ``{"error": "..."}`` answers a bad
request; the process ends at end of input.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    import llama_cpp
    import numpy as np

    path, n_ctx, seed, threads = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    # logits_all: only then does eval() keep the logits in ``scores`` (0.3.36 samples inside its sampler otherwise)
    model = llama_cpp.Llama(path, n_ctx=n_ctx, seed=seed, n_threads=threads, logits_all=True, verbose=False)
    print(json.dumps({"ready": llama_cpp.__version__, "vocab": model.n_vocab()}), flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            ids, n, banned = [int(t) for t in request["ids"]], int(request["n"]), [int(t) for t in request["banned"]]
            if not ids or n < 1 or len(ids) + n > n_ctx:
                raise ValueError(f"{len(ids)} prompt ids + {n} tokens do not fit n_ctx {n_ctx}")
            model.reset()
            model.eval(ids)
            tokens: list[int] = []
            for _ in range(n):
                logits = np.array(model.scores[model.n_tokens - 1], dtype=np.float32)
                logits[banned] = -np.inf
                tokens.append(int(logits.argmax()))
                if len(tokens) < n:
                    model.eval([tokens[-1]])
            answer: dict = {"tokens": tokens}
        except (ValueError, KeyError, TypeError, RuntimeError) as exc:
            answer = {"error": " ".join(str(exc).split())[:300]}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
