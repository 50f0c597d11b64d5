"""Mean tokens per AgentTraj episode per environment, under a byte-level BPE trained on the trajectories.

Rollout and training time grow with tokens, so this is the cost of each environment's observations.
Prints, per environment, the system prompt's tokens (the same in every episode), the mean tokens of an
episode after it (instruction, observations, thoughts and actions) and characters per token. Run after `dvc repro trajectories`:

    python benchmarks/episode_tokens.py [--vocab 2048]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def episode_texts(agenttraj_dir: Path) -> dict[str, tuple[str, list[str]]]:
    """Per environment: the system prompt (AgentGym's first human turn and the "OK" after it), and each
    episode's text after it."""
    texts = {}
    for path in sorted(agenttraj_dir.glob("*.json")):
        convs = json.loads(path.read_text())
        prompt = "\n".join(turn["value"] for turn in convs[0]["conversations"][:2])
        texts[path.stem] = (prompt, ["\n".join(t["value"] for t in c["conversations"][2:]) for c in convs])
    return texts


def train_bpe(texts: list[str], vocab: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/agenttraj")
    parser.add_argument("--vocab", type=int, default=2048)
    args = parser.parse_args()
    texts = episode_texts(Path(args.data))
    if not texts:
        raise SystemExit(f"no AgentTraj files in {args.data}: run `dvc repro trajectories` first")
    tok = train_bpe([t for prompt, ts in texts.values() for t in [prompt, *ts]], args.vocab)
    table = Table(title=f"AgentTraj episodes under a {tok.get_vocab_size()}-token byte-level BPE")
    for col in ["env", "episodes", "prompt tokens", "tokens/episode after it", "total", "chars/token"]:
        table.add_column(col, justify="right")
    for env, (prompt, ts) in texts.items():
        chars, n = sum(map(len, ts)), len(ts)
        tokens = sum(len(e.ids) for e in tok.encode_batch(ts))
        prompt_tokens = len(tok.encode(prompt).ids)
        row = [str(n), str(prompt_tokens), f"{tokens / n:.0f}", f"{prompt_tokens + tokens / n:.0f}"]
        table.add_row(env, *row, f"{chars / tokens:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
