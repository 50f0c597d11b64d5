"""The initial model: tokenizer round trip, the assistant-only mask of the chat template, the built decoder."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gymflow.config import ModelConfig
from gymflow.errors import UserError
from gymflow.models.build import build_initial, build_model, resolve, write_source
from gymflow.models.tokenizer import IM_END, IM_START

TEXTS = [
    "pos 2,1 goal 0,4 walls: down",
    "Thought: the goal is up and right, so I move up.\nAction: move up",
    "craft 4 oak planks using 1 oak log",
    "Feedback: b y g b b",
] * 20


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("init")
    cfg = ModelConfig(
        vocab_size=300, hidden_size=16, intermediate_size=32, layers=1, heads=2, kv_heads=1, max_length=128
    )
    build_initial(TEXTS, cfg, path)
    return path


def test_any_text_round_trips_and_specials_are_single_tokens(saved):
    tok = AutoTokenizer.from_pretrained(saved)
    text = "unseen wörds ✓ and\ttabs\n  spaces"
    assert tok.decode(tok(text)["input_ids"]) == text
    ids = tok(f"{IM_START}user\nhi{IM_END}")["input_ids"]
    assert ids[0] == tok.convert_tokens_to_ids(IM_START) and ids[-1] == tok.eos_token_id
    assert len(tok) <= 300


def test_loss_mask_covers_exactly_the_assistant_replies_and_their_end(saved):
    tok = AutoTokenizer.from_pretrained(saved)
    messages = [
        {"role": "system", "content": "You are in a maze."},
        {"role": "user", "content": "pos 0,0 goal 1,1 walls: up"},
        {"role": "assistant", "content": "Thought: down first.\nAction: move down"},
        {"role": "user", "content": "pos 1,0 goal 1,1 walls: down"},
        {"role": "assistant", "content": "Thought: now right.\nAction: move right"},
    ]
    out = tok.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = out["input_ids"], out["assistant_masks"]
    trained = [i for i, m in zip(ids, mask, strict=True) if m]
    replies = [m["content"] + IM_END for m in messages if m["role"] == "assistant"]
    assert trained == [i for r in replies for i in tok(r)["input_ids"]]
    # what the model is asked to continue ends with the assistant header, outside the mask
    prompt = tok.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith(f"{IM_START}assistant\n")


def test_built_model_has_the_configured_shape_and_seeded_weights(saved):
    model = AutoModelForCausalLM.from_pretrained(saved)
    tok = AutoTokenizer.from_pretrained(saved)
    assert model.config.model_type == "qwen2" and model.config.vocab_size == len(tok)
    assert model.config.num_hidden_layers == 1 and model.config.num_key_value_heads == 1
    assert model.config.tie_word_embeddings and model.config.eos_token_id == tok.eos_token_id
    cfg = ModelConfig(hidden_size=16, intermediate_size=32, layers=1, heads=2, kv_heads=1, max_length=128)
    again = build_model(cfg, tok)
    loaded, rebuilt = model.state_dict(), again.state_dict()
    assert loaded.keys() == rebuilt.keys() and all(torch.equal(loaded[k], rebuilt[k]) for k in loaded)
    logits = model(torch.tensor([tok("move up")["input_ids"]])).logits
    assert logits.shape[-1] == len(tok) and torch.isfinite(logits).all()


def test_a_named_model_is_recorded_not_built(tmp_path, saved):
    write_source(tmp_path / "init", str(saved))
    assert resolve(tmp_path / "init") == str(saved)
    assert json.loads((tmp_path / "init" / "gymflow_source.json").read_text()) == {"name_or_path": str(saved)}
    assert resolve(saved) == str(saved)
    with pytest.raises(UserError, match="dvc repro init_model"):
        resolve(tmp_path / "missing")


def test_bad_head_counts_are_one_line_errors():
    with pytest.raises(ValueError, match="not a multiple of heads"):
        ModelConfig(hidden_size=30, heads=4)
    with pytest.raises(ValueError, match="not a multiple of kv_heads"):
        ModelConfig(heads=4, kv_heads=3)
