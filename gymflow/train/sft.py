"""Behaviour cloning on AgentTraj with TRL's SFTTrainer, loss on assistant tokens only.

The chat template's `{% generation %}` markers give the assistant mask (`assistant_only_loss`), so the
environment's text is context and never a target. Full fine-tuning for the tiny default, LoRA as a switch.
Each environment's episodes are repeated as many times as its passes in `sft.envs` and the mixture trained
on in one shuffled pass: environments that learn slowly get more passes without more of the others.
Checkpoints go beside the output ten times per run, so an interrupted run resumes from the last one.
"""

from __future__ import annotations

import csv
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import SFTConfig, SFTTrainer

from gymflow.config import SFTParams
from gymflow.rollout.records import config_hash
from gymflow.store.db import connect
from gymflow.store.io import atomic_dir, atomic_path


def conversations(data_dir: str | Path, envs: list[str], stage: str = "trajectories") -> list[dict[str, Any]]:
    """Every stored episode of `stage` in `envs` as chat messages, without the last observation (no reply
    follows it, so it teaches nothing)."""
    rows = (
        connect(data_dir)
        .execute(
            """select e.episode_id, t.role, t.text from turns t join episodes e using (episode_id)
           where e.stage = ? and list_contains(?, e.env) order by e.episode_id, t.turn""",
            [stage, envs],
        )
        .fetchall()
    )
    convs: dict[str, list[dict[str, str]]] = {}
    for episode_id, role, text in rows:
        convs.setdefault(episode_id, []).append({"role": role, "content": text})
    return [{"messages": m[:-1] if m[-1]["role"] == "user" else m} for m in convs.values()]


def mixture(data_dir: str | Path, passes: dict[str, int]) -> list[dict[str, Any]]:
    """The training set: each environment's AgentTraj conversations, repeated `passes[env]` times."""
    return [conv for env, n in passes.items() for conv in conversations(data_dir, [env]) * n]


class AssistantLossTrainer(SFTTrainer):
    """SFTTrainer with the model's own cross-entropy on the assistant labels as the loss.

    TRL computes the loss through a chunked LM-head kernel that never materializes the logits (a GPU memory
    saving) and also returns entropy and token accuracy. On CPU with a small vocabulary that kernel is most of
    the step: this loss is the same number (tests/test_sft.py) and trains 1.9x faster here
    (`benchmarks/sft_throughput.py`). Data, masks, batching, checkpoints and LoRA stay TRL's.
    """

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(
            input_ids=inputs["input_ids"],
            attention_mask=inputs.get("attention_mask"),
            position_ids=inputs.get("position_ids"),
            labels=inputs["labels"],
            num_items_in_batch=num_items_in_batch,
        )
        return (outputs.loss, outputs) if return_outputs else outputs.loss


class CurveWriter(TrainerCallback):
    """Training loss and learning rate per logging step, as a CSV that `dvc plots` draws."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict[str, float]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.rows.append(
                {"step": state.global_step, "loss": logs["loss"], "lr": logs.get("learning_rate", 0.0)}
            )
            with atomic_path(self.path) as tmp, tmp.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=["step", "loss", "lr"])
                writer.writeheader()
                writer.writerows(self.rows)


def use_bf16(setting: bool | str) -> bool:
    """`sft.bf16` resolved: "auto" is bf16 where it is native (a CUDA device that has it; a CPU with AVX-512
    BF16 or AMX). Elsewhere CPU autocast emulates bf16: 12x slower than fp32 on an AVX2-only EPYC here
    (`python benchmarks/sft_precision.py`), where a CPU with AVX-512 BF16 trained 1.2-1.6x faster with it."""
    if setting != "auto":
        return bool(setting)
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private, so looked up with a default
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def sft_args(cfg: SFTParams, output_dir: Path, tokenized: bool = False) -> SFTConfig:
    """TRL's configuration for `cfg`: one pass over the mixture (`mixture`), assistant-only loss,
    length-grouped batches, ten checkpoints. Tokenized rows bring their own loss mask (`assistant_masks`,
    which TRL turns into labels), so the chat template's markers are not needed for them."""
    return SFTConfig(
        output_dir=str(output_dir),
        num_train_epochs=1,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        lr_scheduler_type="cosine",
        warmup_steps=cfg.warmup,
        weight_decay=0.0,
        max_length=cfg.max_length,
        assistant_only_loss=not tokenized,
        padding_free=False,  # needs FlashAttention; on CPU, batches of similar length waste little instead
        train_sampling_strategy="group_by_length",
        bf16=use_bf16(cfg.bf16),
        use_cpu=not torch.cuda.is_available(),
        seed=cfg.seed,
        logging_steps=cfg.log_every,
        save_strategy="steps",
        save_steps=0.1,  # a fraction of all steps
        save_total_limit=1,
        report_to=[],
        disable_tqdm=False,
    )


def train_sft(
    init_model: str, out_dir: Path, data: list[dict[str, Any]], cfg: SFTParams, curve_path: Path
) -> dict[str, float]:
    """Fine-tune `init_model` on `data` (conversations as `messages`, or tokenized rows of `input_ids` and
    `assistant_masks`) and save the result (merged, if LoRA) to `out_dir`."""
    tokenizer = AutoTokenizer.from_pretrained(init_model)
    model = AutoModelForCausalLM.from_pretrained(init_model)
    # Checkpoints of this exact run only: other parameters or data start afresh instead of resuming.
    run_key = config_hash([cfg.model_dump(), init_model, len(data)])
    checkpoints = out_dir.with_name(out_dir.name + ".checkpoints") / run_key
    args = sft_args(cfg, checkpoints, tokenized="input_ids" in data[0])
    peft_config = None
    if cfg.lora_rank:
        from peft import LoraConfig

        peft_config = LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank, target_modules="all-linear")
    trainer = AssistantLossTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(data),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[CurveWriter(curve_path)],
    )
    resume = any(checkpoints.glob("checkpoint-*"))
    start = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=resume or None)
    wall = time.perf_counter() - start
    tokens = sum(len(ids) for ids in trainer.train_dataset["input_ids"])
    trained = trainer.model.merge_and_unload() if cfg.lora_rank else trainer.model
    with atomic_dir(out_dir) as tmp:
        trained.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    shutil.rmtree(checkpoints.parent, ignore_errors=True)
    return {
        "train_loss": round(result.training_loss, 4),
        "episodes": len(data),
        "tokens_per_second": round(tokens / wall),
        "bf16": args.bf16,
        "wall_seconds": round(wall, 1),
    }
