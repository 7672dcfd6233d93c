"""What the requests say: synthetic lengths, a user's prompt file, shared-prefix groups,
multi-turn conversations and a timestamped trace. One seed makes the sequence reproducible.

Lengths are a fixed integer or a distribution (``LengthSpec``): ``128``, ``uniform:64:256``,
``normal:128:32`` (clipped to at least 1). Without a tokenizer a synthetic prompt of length L
is L words drawn from a fixed list (the server's ``usage`` then says how many tokens they
were); with one, the words are cut to exactly L tokens.

Files:
  prompt file  ShareGPT JSON (a list of ``{"conversations": [{"from": "human"|"gpt", "value": ...}]}``)
               or JSONL, one object a line: ``{"prompt": ...}`` (or ``"text"``), optionally
               ``"output_tokens"``; a ShareGPT record per line also works.
  trace        JSONL, one request a line: ``"timestamp"`` (ms from the trace's start, as
               Mooncake's traces), ``"input_length"`` or ``"prompt"``, ``"output_length"``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from common.errors import ConfigError, DataError, shown
from tools.serving.client import RequestSpec

WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they you "
    "were her she there been one all we their has would when if so no will more what up can out some time only new "
    "other could than first also after two like our over any these into most made may people its then years where "
    "state city world work life part year place both such long high great small house music name under through"
).split()


@dataclass(frozen=True)
class LengthSpec:
    kind: str  # fixed | uniform | normal
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, value: Any, key: str) -> "LengthSpec":
        if isinstance(value, int) and not isinstance(value, bool):
            spec = cls("fixed", value)
        elif isinstance(value, str):
            parts = value.split(":")
            try:
                if len(parts) == 1:
                    spec = cls("fixed", int(parts[0]))
                elif parts[0] in ("uniform", "normal") and len(parts) == 3:
                    spec = cls(parts[0], float(parts[1]), float(parts[2]))
                else:
                    raise ValueError
            except ValueError:
                raise ConfigError(
                    f"{key}: {shown(value)} is not a length (N, uniform:MIN:MAX or normal:MEAN:STD)"
                ) from None
        else:
            raise ConfigError(f"{key}: {shown(value)} is not a length (N, uniform:MIN:MAX or normal:MEAN:STD)")
        if spec.a < 1 or (spec.kind == "uniform" and spec.b < spec.a) or (spec.kind == "normal" and spec.b < 0):
            raise ConfigError(f"{key}: {shown(value)} must be at least 1 (uniform: MIN <= MAX; normal: STD >= 0)")
        return spec

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        return max(1, round(rng.gauss(self.a, self.b)))


class Text:
    """Prompt text of a given length: words without a tokenizer, exactly N tokens with one."""

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer

    def words(self, rng: random.Random, length: int) -> str:
        if self.tokenizer is None:
            return " ".join(rng.choice(WORDS) for _ in range(length))
        ids: list[int] = []
        while len(ids) < length:
            ids += self.tokenizer.encode(" ".join(rng.choice(WORDS) for _ in range(length)), add_special_tokens=False)
        return self.tokenizer.decode(ids[:length])

    def count(self, text: str) -> int | None:
        return None if self.tokenizer is None else len(self.tokenizer.encode(text, add_special_tokens=False))


def synthetic(
    count: int, input_len: LengthSpec, output_len: LengthSpec, seed: int, text: Text, start: int = 0
) -> list[RequestSpec]:
    rng = random.Random(seed)
    specs = []
    for i in range(count):
        prompt = text.words(rng, input_len.draw(rng))
        specs.append(RequestSpec(start + i, prompt, output_len.draw(rng), input_tokens=text.count(prompt)))
    return specs


def shared_prefix(
    count: int, groups: int, prefix_len: int, input_len: LengthSpec, output_len: LengthSpec, seed: int, text: Text
) -> list[RequestSpec]:
    """``groups`` prefixes of ``prefix_len``; request i belongs to group i % groups and adds its own suffix."""
    rng = random.Random(seed)
    prefixes = [text.words(rng, prefix_len) for _ in range(groups)]
    specs = []
    for i in range(count):
        prompt = prefixes[i % groups] + " " + text.words(rng, input_len.draw(rng))
        specs.append(RequestSpec(i, prompt, output_len.draw(rng), input_tokens=text.count(prompt), group=i % groups))
    return specs


def multi_turn(conversations: list[list[str]], output_len: LengthSpec, seed: int) -> list[list[RequestSpec]]:
    """Each conversation's user turns as chat requests; the runner fills in the replies (``history``)."""
    rng = random.Random(seed)
    out, index = [], 0
    for c, turns in enumerate(conversations):
        chain = []
        for t, user in enumerate(turns):
            chain.append(
                RequestSpec(index, [{"role": "user", "content": user}], output_len.draw(rng), conversation=c, turn=t)
            )
            index += 1
        out.append(chain)
    return out


def synthetic_conversations(count: int, turns: int, input_len: LengthSpec, seed: int, text: Text) -> list[list[str]]:
    rng = random.Random(seed)
    return [[text.words(rng, input_len.draw(rng)) for _ in range(turns)] for _ in range(count)]


# ---- files ------------------------------------------------------------------------------
def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line or 0, object) from a JSON file (a list) or a JSONL file; DataError naming the line."""
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read the prompt file ({type(exc).__name__}: {exc})") from None
    stripped = raw.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise DataError(f"{path}: not valid JSON ({exc})") from None
        except RecursionError:
            raise DataError(f"{path}: JSON nested too deeply to read") from None
        if not isinstance(data, list):
            raise DataError(f"{path}: a JSON prompt file must be a list of records")
        yield from ((0, item) for item in data)
        return
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            raise DataError(f"{path}:{number}: not valid JSON or JSONL ({exc})") from None
        except RecursionError:
            raise DataError(f"{path}:{number}: JSON nested too deeply to read") from None


def _where(path: Path, line: int) -> str:
    return f"{path}:{line}" if line else str(path)


def read_prompts(path: str | Path) -> list[tuple[list[str], int | None]]:
    """Each record's user turns and, when known, its reply length in words (ShareGPT's first reply)."""
    path = Path(path)
    out: list[tuple[list[str], int | None]] = []
    for line, item in _records(path):
        if not isinstance(item, dict):
            raise DataError(f"{_where(path, line)}: a prompt record must be an object, got {type(item).__name__}")
        if "conversations" in item:
            turns = item["conversations"]
            if not isinstance(turns, list) or not all(
                isinstance(t, dict) and isinstance(t.get("value"), str) for t in turns
            ):
                raise DataError(f"{_where(path, line)}: 'conversations' must be a list of {{'from', 'value'}} objects")
            users = [t["value"] for t in turns if t.get("from") in ("human", "user")]
            replies = [t["value"] for t in turns if t.get("from") in ("gpt", "assistant")]
            if users:
                out.append((users, len(replies[0].split()) if replies else None))
            continue
        prompt = item.get("prompt", item.get("text"))
        if not isinstance(prompt, str):
            raise DataError(
                f"{_where(path, line)}: a prompt record needs a string 'prompt' (or 'text' or ShareGPT 'conversations')"
            )
        length = item.get("output_tokens")
        if length is not None and (not isinstance(length, int) or length < 1):
            raise DataError(f"{_where(path, line)}: 'output_tokens' must be a positive integer, got {shown(length)}")
        out.append(([prompt], length))
    if not out:
        raise DataError(f"{path}: no prompts in the prompt file")
    return out


def from_prompt_file(
    path: str | Path, count: int, output_len: LengthSpec | None, seed: int, text: Text
) -> list[RequestSpec]:
    """``count`` requests drawn (with the seed, cycling when the file is shorter) from the file's first turns."""
    prompts = read_prompts(path)
    rng = random.Random(seed)
    order = list(range(len(prompts)))
    rng.shuffle(order)
    specs = []
    for i in range(count):
        turns, reply = prompts[order[i % len(order)]]
        max_tokens = output_len.draw(rng) if output_len is not None else max(reply or 128, 1)
        specs.append(RequestSpec(i, turns[0], max_tokens, input_tokens=text.count(turns[0])))
    return specs


def read_trace(path: str | Path, output_len: LengthSpec | None, seed: int, text: Text) -> list[RequestSpec]:
    """A timestamped trace: each request at its timestamp (ms) from the first one's."""
    path = Path(path)
    rng = random.Random(seed)
    specs: list[RequestSpec] = []
    for line, item in _records(path):
        where = _where(path, line)
        if not isinstance(item, dict) or not isinstance(item.get("timestamp"), (int, float)) or item["timestamp"] < 0:
            raise DataError(f"{where}: a trace record needs a non-negative 'timestamp' (ms)")
        if isinstance(item.get("prompt"), str):
            prompt = item["prompt"]
        elif isinstance(item.get("input_length"), int) and item["input_length"] > 0:
            prompt = text.words(rng, item["input_length"])
        else:
            raise DataError(f"{where}: a trace record needs 'prompt' or a positive 'input_length'")
        out = item.get("output_length")
        if out is None:
            out = output_len.draw(rng) if output_len is not None else 128
        if not isinstance(out, int) or out < 1:
            raise DataError(f"{where}: 'output_length' must be a positive integer, got {shown(out)}")
        specs.append(
            RequestSpec(
                len(specs), prompt, out, input_tokens=text.count(prompt), arrival_s=float(item["timestamp"]) / 1e3
            )
        )
    if not specs:
        raise DataError(f"{path}: no requests in the trace")
    arrivals = [s.arrival_s or 0.0 for s in specs]  # every trace record has its timestamp
    first = min(arrivals)
    for s, arrival in zip(specs, arrivals):
        s.arrival_s = arrival - first
    specs.sort(key=lambda s: s.arrival_s or 0.0)
    return specs
