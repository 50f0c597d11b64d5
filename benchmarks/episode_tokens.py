"""Mean tokens per AgentTraj episode per environment: under the tokenizer `init_model` builds, and under the
one the stages encoded with before it matched what transformers loads.

Rollout and training time grow with tokens, so this is the cost of each environment's observations. Both
tokenizers are trained on the same AgentTraj text with the same vocabulary:
- before: a byte-level BPE with GPT-2's split (what `init_model` trained up to 65cfb45), encoded as every
  stage loaded it: transformers builds `Qwen2Tokenizer` for a qwen2 model directory, which put NFC and Qwen's
  split (digits one by one) in front of merges learned without them. "as built" is that tokenizer.json
  read as it was written, which no stage used;
- now: `gymflow.models.tokenizer.train_tokenizer`, trained with the pipeline it is loaded with.
Prints, per environment, the system prompt's tokens (the same in every episode), the mean tokens of an
episode after it (instruction, observations, thoughts and actions), their sum, characters per token, and
now / before. Run after `dvc repro trajectories`:

    python benchmarks/episode_tokens.py [--data data/agenttraj] [--vocab 2048]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast, Qwen2Config

from gymflow import paths
from gymflow.models.tokenizer import SPECIAL_TOKENS, train_tokenizer


def episode_texts(agenttraj_dir: Path) -> dict[str, tuple[str, list[str]]]:
    """Per environment: the system prompt (AgentGym's first human turn and the "OK" after it), and each
    episode's text after it."""
    texts = {}
    for path in sorted(agenttraj_dir.glob("*.json")):
        convs = json.loads(path.read_text())
        prompt = "\n".join(turn["value"] for turn in convs[0]["conversations"][:2])
        texts[path.stem] = (prompt, ["\n".join(t["value"] for t in c["conversations"][2:]) for c in convs])
    return texts


def train_bytelevel(texts: list[str], vocab: int) -> Tokenizer:
    """The tokenizer `init_model` trained before: byte-level BPE with GPT-2's split, no normalizer."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIAL_TOKENS, initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def as_loaded(tok: Tokenizer) -> PreTrainedTokenizerBase:
    """`tok` as the stages loaded it: saved beside a qwen2 config, read back by AutoTokenizer."""
    with tempfile.TemporaryDirectory() as folder:
        PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
        Qwen2Config().save_pretrained(folder)
        return AutoTokenizer.from_pretrained(folder)


def count(tok: Tokenizer | PreTrainedTokenizerBase, texts: list[str]) -> int:
    if isinstance(tok, Tokenizer):
        return sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
    return sum(len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(paths.AGENTTRAJ))
    parser.add_argument("--vocab", type=int, default=2048)
    args = parser.parse_args()
    texts = episode_texts(Path(args.data))
    if not texts:
        raise SystemExit(f"no AgentTraj files in {args.data}: run `dvc repro trajectories` first")
    corpus = [t for prompt, ts in texts.values() for t in [prompt, *ts]]
    built = train_bytelevel(corpus, args.vocab)
    tokenizers = {"as built": built, "before": as_loaded(built), "now": train_tokenizer(corpus, args.vocab)}
    table = Table(title=f"Tokens per AgentTraj episode, {args.vocab}-token BPEs trained on {args.data}")
    table.add_column("env")
    for col in ["episodes", "before: prompt + episode", "as built", "now: prompt + episode"]:
        table.add_column(col, justify="right")
    for col in ["chars/token now", "now/before"]:
        table.add_column(col, justify="right")
    for env, (prompt, ts) in texts.items():
        n = len(ts)
        prompt_tokens = {name: count(tok, [prompt]) for name, tok in tokenizers.items()}
        after = {name: count(tok, ts) / n for name, tok in tokenizers.items()}
        total = {name: prompt_tokens[name] + after[name] for name in tokenizers}
        chars = (len(prompt) + sum(map(len, ts)) / n) / total["now"]
        cells = [f"{prompt_tokens[k]} + {after[k]:.0f} = {total[k]:.0f}" for k in ("before", "now")]
        ratio = total["now"] / total["before"]
        table.add_row(
            env, str(n), cells[0], f"{total['as built']:.0f}", cells[1], f"{chars:.2f}", f"{ratio:.3f}"
        )
    Console().print(table)


if __name__ == "__main__":
    main()
