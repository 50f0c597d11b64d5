"""How trained weights are named, saved and checkpointed: one place for every stage that trains."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from gymflow.store.io import atomic_dir


def weights_hash(model: torch.nn.Module) -> str:
    """A content hash of the weights, so that rollouts and checkpoints name exactly the weights they came from."""
    h = hashlib.sha256()
    for tensor in model.state_dict().values():
        h.update(tensor.detach().to("cpu", torch.float32).numpy().tobytes())
    return h.hexdigest()[:12]


def checkpoint_dir(out_dir: Path, run_key: str) -> Path:
    """Where a run that will save to `out_dir` keeps its checkpoints: beside the output, under the run's key
    (`config_hash` of everything that makes the run), so a changed run never resumes another's state."""
    return out_dir.with_name(out_dir.name + ".checkpoints") / run_key


def save_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out_dir: Path) -> None:
    """A Hugging Face model directory at `out_dir`, written whole or not at all (LoRA adapters merged first)."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
