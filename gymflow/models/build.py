"""The default policy: a small Qwen2-style decoder built from `params.yaml`, or a named model used as is."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM

from gymflow.config import ModelConfig
from gymflow.errors import UserError

SOURCE_FILE = "gymflow_source.json"  # in the init_model output when a named model is used instead


def build_model(cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 decoder sized by `cfg`, its vocabulary that of `tokenizer`."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.kv_heads,
        max_position_embeddings=cfg.max_length,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(cfg.seed)
    return Qwen2ForCausalLM(config)


def build_initial(texts: list[str], cfg: ModelConfig, out_dir: Path) -> Qwen2ForCausalLM:
    """Train the tokenizer on `texts`, build the model from `cfg`, and save both to `out_dir`."""
    from gymflow.models.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(texts, cfg.vocab_size)
    model = build_model(cfg, tokenizer)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir)
    return model


def lora_config(rank: int):
    """The adapters SFT and RL train when `lora_rank` > 0: rank `rank` on every linear layer, alpha 2 * rank."""
    from peft import LoraConfig  # only LoRA runs need peft loaded

    return LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear")


def write_source(out_dir: Path, name_or_path: str) -> None:
    """Record that the initial model is `name_or_path`, unchanged, instead of a built one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SOURCE_FILE).write_text(json.dumps({"name_or_path": name_or_path}) + "\n")


def resolve(model_dir: str | Path) -> str:
    """The path or Hub id to load for a model directory a stage wrote (follows `write_source`)."""
    model_dir = Path(model_dir)
    source = model_dir / SOURCE_FILE
    if source.exists():
        return json.loads(source.read_text())["name_or_path"]
    if not (model_dir / "config.json").exists():
        raise UserError(f"no model in {model_dir}: run `dvc repro init_model` first")
    return str(model_dir)


# What a tokenizer pipeline changes: composed and decomposed letters, digit runs, whitespace runs, newlines.
PROBE = "Café cafe\u0301 \u212b 2024-01-05 x1y22  two  spaces\t\n\n\r\n[/x] don't 日本 🙂\n"


def load_tokenizer(model_dir: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer of a model directory a stage wrote (or the model it names, or a Hub id). A local one
    must encode as its own tokenizer.json: transformers gives some model types a tokenizer class that puts its
    own normalizer and split before the file's merges (qwen2 among them; `gymflow.models.tokenizer`), so a
    directory built by gymflow before it trained under that split would train and sample on other ids."""
    source = resolve(model_dir) if Path(model_dir).is_dir() else str(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(source)
    saved = Path(source) / "tokenizer.json"
    if saved.is_file():
        expected = Tokenizer.from_file(str(saved)).encode(PROBE, add_special_tokens=False).ids
        if tokenizer(PROBE, add_special_tokens=False)["input_ids"] != expected:
            raise UserError(
                f"{source}: transformers loads its tokenizer as {type(tokenizer).__name__}, which encodes "
                "differently from its tokenizer.json (built by an older gymflow?): rebuild it with "
                "`dvc repro init_model` and the stages after it"
            )
    return tokenizer
