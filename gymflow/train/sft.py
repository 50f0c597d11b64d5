"""Behaviour cloning on AgentTraj with TRL's SFTTrainer, loss on assistant tokens only.

The chat template's `{% generation %}` markers give the assistant mask (`assistant_only_loss`), so the
environment's text is context and never a target. Full fine-tuning for the tiny default, LoRA as a switch.
Each environment's episodes are repeated as many times as its passes in `sft.envs` and the mixture trained
on in one shuffled pass: environments that learn slowly get more passes without more of the others.
Checkpoints go beside the output ten times per run, each visible only once complete, so an interrupted run
(Ctrl-C or `kill -9`) resumes from the last one and ends with the weights, curve and metrics of a run that was
never stopped.

Data-parallel under `accelerate launch` (`--multi_gpu --num_processes N`: torchrun's processes, NCCL on GPUs,
gloo on CPUs): `sft.batch_size` is the global batch, every process reads the same global batches in one process's
order and trains on its rows (`process_share`), so N processes take one process's optimizer steps on the same
examples. The first process alone writes checkpoints, curve and model.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from accelerate.data_loader import BatchSamplerShard
from datasets import Dataset
from torch import nn
from transformers import AutoModelForCausalLM, TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import SFTConfig, SFTTrainer

from gymflow.config import SFTParams
from gymflow.errors import UserError
from gymflow.models.build import load_tokenizer, lora_config
from gymflow.models.files import checkpoint_dir, save_model, weights_hash
from gymflow.progress import is_terminal
from gymflow.rollout.records import config_hash
from gymflow.store.db import connect
from gymflow.store.io import share_modes, write_csv
from gymflow.train.shared_prompt import GroupedLengthSampler, group_key, prefix_then_rows, shared_prefix

# Under a run's checkpoint folder, where the trainer writes a checkpoint until it is whole (`Checkpoints`).
STAGING = ".incomplete"
# In a checkpoint, beside the trainer's own trainer_state.json: the seconds of training that led to it.
RUN_STATE = "gymflow_state.json"
# The column that numbers the distinct rows SFT tokenizes (`train_sft`).
DISTINCT = "gymflow_distinct_row"


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
    return [conversation(m) for m in convs.values()]


def conversation(messages: list[dict[str, str]]) -> dict[str, Any]:
    """One episode's chat messages as a training row, without the last observation (no reply follows it)."""
    return {"messages": messages[:-1] if messages[-1]["role"] == "user" else messages}


def mixture(data_dir: str | Path, passes: dict[str, int]) -> list[dict[str, Any]]:
    """The training set: each environment's AgentTraj conversations, repeated `passes[env]` times."""
    return [conv for env, n in passes.items() for conv in conversations(data_dir, [env]) * n]


class AssistantLossTrainer(SFTTrainer):
    """SFTTrainer with the causal-LM cross-entropy on the assistant labels as the loss, its LM head run on the
    labelled positions only.

    TRL computes the loss through a chunked LM-head kernel that never materializes the logits (a GPU memory
    saving) and also returns entropy and token accuracy. On CPU with a small vocabulary that kernel is most of
    the step: this loss is the same number (tests/test_sft.py) and trains 1.9x faster here
    (`benchmarks/sft_throughput.py`). The model's own loss (`labels=`) would still project every position onto
    the vocabulary, though two thirds of an agent's episode is context that is never a target: a pre-hook hands
    the LM head the labelled positions' states alone, the same loss and gradients for less work
    (`benchmarks/sft_mixture.py`). Data, masks, batching, checkpoints and LoRA stay TRL's.

    Under several processes each one loads the whole global batch and trains on its share of the rows
    (`process_share`). Accelerate's own sharding, per-process batches of batch_size / N, would group lengths by
    that smaller batch (another order than one process's) and fill a short last batch with repeated examples;
    this way N processes train on exactly one process's batches.
    """

    def get_train_dataloader(self):
        loader = super().get_train_dataloader()
        if self.accelerator.num_processes > 1:
            shard = loader.batch_sampler
            if not isinstance(shard, BatchSamplerShard):  # accelerate shards otherwise: fail, not mis-train
                raise RuntimeError(f"expected accelerate's BatchSamplerShard, got {type(shard).__name__}")
            # every process reads every global batch (the Trainer's own passthrough for rank-aware samplers), and
            # a short last batch as it is, not filled up with the first batch's examples
            shard.num_processes, shard.process_index, shard.even_batches = 1, 0, False
        return loader

    def _get_train_sampler(self, train_dataset=None):
        """TRL's length-grouped order, regrouped so that a batch's rows begin alike (`GroupedLengthSampler`)."""
        dataset = self.train_dataset if train_dataset is None else train_dataset
        if self.args.train_sampling_strategy != "group_by_length" or "input_ids" not in dataset.column_names:
            return super()._get_train_sampler(train_dataset)
        lengths, keys = [], []
        for chunk in dataset.select_columns(["input_ids"]).iter(batch_size=4096):  # not the column at once
            lengths += [len(row) for row in chunk["input_ids"]]
            keys += [group_key(row) for row in chunk["input_ids"]]
        batch = self.args.train_batch_size * self.args.gradient_accumulation_steps
        return GroupedLengthSampler(batch, lengths, keys)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        processes = self.accelerator.num_processes
        if processes > 1:
            # the global batch's target tokens (labels shift by one), whatever the Trainer counted
            num_items_in_batch = (inputs["labels"][:, 1:] != -100).sum()
            inputs, weight = process_share(inputs, self.accelerator.process_index, processes)
        bare = self.accelerator.unwrap_model(model)
        share = (
            not self.args.gradient_checkpointing
        )  # the prefix's cache needs `use_cache`, which it turns off
        loss, outputs = assistant_loss(model, bare, inputs, num_items_in_batch, share)
        loss = loss * weight if processes > 1 else loss
        return (loss, outputs) if return_outputs else loss


def assistant_loss(
    model: Callable[..., Any],
    bare: nn.Module,
    inputs: dict[str, Any],
    num_items: torch.Tensor | int | None = None,
    share: bool = True,
) -> tuple[torch.Tensor, Any]:
    """The cross-entropy of `inputs`' labelled ids (summed over `num_items`, or averaged) and the model's output:
    `model` called once (the Trainer's, maybe DDP's wrapper; `bare` is the model inside it), its LM head run on the
    labelled positions only. With `share`, leading ids every row shares run once (`gymflow.train.shared_prompt`)."""
    ids, mask = inputs["input_ids"], causal_mask(inputs.get("attention_mask"))
    targets = inputs["labels"][:, 1:]  # position t predicts the id at t + 1
    row, position = (targets != -100).nonzero(as_tuple=True)
    shared = 0
    if share and mask is None and inputs.get("position_ids") is None:
        shared = shared_prefix(ids, inputs["labels"])
    head = bare.get_output_embeddings()
    hook = head.register_forward_pre_hook(lambda _, args: (args[0][row, position - shared],))
    try:  # through the wrapper: DDP's gradient hooks and LoRA's adapters run as they always do
        if shared:
            outputs = prefix_then_rows(model, bare, ids, shared)
        else:
            outputs = model(input_ids=ids, attention_mask=mask, position_ids=inputs.get("position_ids"))
    finally:
        hook.remove()
    loss = nn.functional.cross_entropy(outputs.logits.float(), targets[row, position], reduction="sum")
    return loss / (len(row) if num_items is None else num_items), outputs


def causal_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The attention mask the model needs: none for a right-padded batch. A causal model's real tokens never
    attend to padding that follows them, and padded positions carry no label, so the loss and gradients are the
    masked ones (tests/test_sft.py), while SDPA without a mask skips building and reading a [batch, 1, L, L]
    mask: 1.1-1.3x faster SFT on draws of the default's mixture (`benchmarks/sft_mixture.py`), most in the long
    batches. Any other mask (left padding, holes) is kept."""
    if mask is None or bool((mask[:, 1:] <= mask[:, :-1]).all()):
        return None
    return mask


def process_share(batch: dict[str, Any], rank: int, processes: int) -> tuple[dict[str, Any], float]:
    """Process `rank`'s rows of a global batch (every `processes`-th from row `rank`) and the weight of its loss.

    The loss is the share's target-token sum over the global batch's count (`num_items_in_batch`) and DDP
    averages gradients over processes, so a weight of `processes` makes the reduced gradient the global batch's,
    and the logged loss (a mean over processes) its mean. A share with no row (a last batch shorter than
    `processes`) trains row 0 at weight 0: the process still joins the gradient all-reduce."""
    n = len(batch["input_ids"])
    rows = slice(rank, None, processes) if rank < n else slice(0, 1)
    share = {k: v[rows] if torch.is_tensor(v) and v.dim() and len(v) == n else v for k, v in batch.items()}
    return share, float(processes) if rank < n else 0.0


class Checkpoints(TrainerCallback):
    """Checkpoints that appear only when complete, fall on logging steps and carry the training time so far.

    The trainer writes `checkpoint-<step>` under `<root>/.incomplete`; `on_save`, which runs after its last
    file, adds the seconds trained so far, renames it into `<root>` and removes the one before: whatever
    moment a kill hits, `<root>` holds only whole checkpoints. Every checkpoint step (and the last step) is
    also a logging step, so the log history a resumed run carries on from is the uninterrupted run's; the
    curve and `train_loss` are read from that history.
    """

    def __init__(self, root: Path, seconds: float = 0.0) -> None:
        self.root, self.before, self.start = root, seconds, time.perf_counter()

    def seconds(self) -> float:
        """Training seconds of the steps so far, earlier sessions' included."""
        return self.before + time.perf_counter() - self.start

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_save or state.global_step >= state.max_steps:
            control.should_log = True

    def on_save(self, args, state, control, **kwargs):
        if args.world_size > 1:  # every process has written its part (RNG state) before the first moves it
            torch.distributed.barrier()
        if not state.is_world_process_zero:
            return
        name = f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        (self.root / STAGING / name / RUN_STATE).write_text(json.dumps({"seconds": self.seconds()}))
        if (self.root / name).exists():
            _discard(self.root / name, self.root)
        share_modes(self.root / STAGING / name)  # safetensors writes the weights private (0o600)
        os.replace(self.root / STAGING / name, self.root / name)
        for old in _checkpoints(self.root):
            if old.name != name:
                _discard(old, self.root)


class CurveWriter(TrainerCallback):
    """The curve so far at every logging step (`write_curve`), for `dvc plots` while training runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs and state.is_world_process_zero:
            write_curve(self.path, state.log_history)


def write_curve(path: Path, history: list[dict[str, Any]]) -> None:
    """Training loss and learning rate per logging step of a trainer's log history, as a CSV."""
    rows = [
        {"step": e["step"], "loss": e["loss"], "lr": e.get("learning_rate", 0.0)}
        for e in history
        if "loss" in e
    ]
    write_csv(path, rows, ["step", "loss", "lr"])


def mean_loss(history: list[dict[str, Any]]) -> float:
    """The mean loss per step over a trainer's log history: each entry is the mean over the steps since the one
    before it. The whole run's, even when it resumed; the trainer's own `training_loss` covers one session."""
    total, steps, last = 0.0, 0, 0
    for entry in history:
        if "loss" in entry:
            total += entry["loss"] * (entry["step"] - last)
            steps, last = entry["step"], entry["step"]
    return total / max(steps, 1)


def last_checkpoint(root: Path) -> Path | None:
    """The latest complete checkpoint under `root`. A partial one (a kill while writing, before checkpoints were
    staged, or a staged one never renamed) is removed: the rerun resumes from the one before, or starts afresh."""
    shutil.rmtree(root / STAGING, ignore_errors=True)
    complete = []
    for path in _checkpoints(root):
        if (path / TRAINER_STATE_NAME).is_file():
            complete.append(path)
        else:
            shutil.rmtree(path)
    return max(complete, key=_step, default=None)


def _checkpoints(root: Path) -> list[Path]:
    return [
        p
        for p in root.glob(f"{PREFIX_CHECKPOINT_DIR}-*")
        if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit()
    ]


def _step(path: Path) -> int:
    return int(path.name.rsplit("-", 1)[1])


def _discard(path: Path, root: Path) -> None:
    """Remove a checkpoint by moving it out of sight first: a kill midway leaves no partial one in view."""
    trash = root / STAGING / f"old-{path.name}"
    shutil.rmtree(trash, ignore_errors=True)
    trash.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, trash)
    shutil.rmtree(trash)


def _seconds_before(checkpoint: Path | None) -> float:
    state = checkpoint / RUN_STATE if checkpoint else None
    return json.loads(state.read_text())["seconds"] if state and state.is_file() else 0.0


def use_bf16(setting: bool | str) -> bool:
    """`sft.bf16` resolved: "auto" is bf16 where it is native (a CUDA device that has it; a CPU with AVX-512
    BF16 or AMX, running PyTorch's AVX-512 kernels). Elsewhere CPU autocast emulates bf16: 12x slower than fp32 on an AVX2-only EPYC here
    (`python benchmarks/sft_precision.py`), where a CPU with AVX-512 BF16 trained 1.2-1.6x faster with it."""
    if setting != "auto":
        return bool(setting)
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private, so looked up with a default
    native = any(getattr(torch.cpu, name, lambda: False)() for name in probes)
    # and PyTorch runs its AVX-512 kernels: ATEN_CPU_CAPABILITY=avx2 (as on an AVX2-only machine) emulates bf16
    return native and torch.backends.cpu.get_cpu_capability() == "AVX512"


def sft_args(cfg: SFTParams, output_dir: Path, tokenized: bool = False) -> SFTConfig:
    """TRL's configuration for `cfg`: one pass over the mixture (`mixture`), assistant-only loss,
    length-grouped batches, ten checkpoints (written to `output_dir`; `Checkpoints` renames each into place).
    Tokenized rows bring their own loss mask (`assistant_masks`, which TRL turns into labels), so the chat
    template's markers are not needed for them. `cfg.batch_size` is the global batch: under N processes each
    trains on batch_size / N of its rows (`AssistantLossTrainer`)."""
    args = SFTConfig(
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
        activation_checkpointing=cfg.activation_checkpointing,
        use_cpu=not torch.cuda.is_available(),
        ddp_find_unused_parameters=False,  # every trainable parameter takes part in each forward pass
        seed=cfg.seed,
        logging_steps=cfg.log_every,
        save_strategy="steps",
        save_steps=0.1,  # a fraction of all steps
        save_total_limit=1,
        report_to=[],
        disable_tqdm=not is_terminal(),  # in a log file, the Trainer prints its logged losses as lines instead
    )
    if cfg.batch_size % args.world_size:
        raise UserError(
            f"sft.batch_size {cfg.batch_size} does not divide among {args.world_size} processes: "
            f"make it a multiple of {args.world_size} (it is the global batch) or launch fewer processes"
        )
    return args


def train_sft(
    init_model: str, out_dir: Path, data: list[dict[str, Any]], cfg: SFTParams, curve_path: Path
) -> dict[str, float]:
    """Fine-tune `init_model` on `data` (conversations as `messages`, or tokenized rows of `input_ids` and
    `assistant_masks`) and save the result (merged, if LoRA) to `out_dir`."""
    tokenizer = load_tokenizer(init_model)
    model = AutoModelForCausalLM.from_pretrained(init_model)
    if not data:  # nothing to learn (AgentEvol kept no episode, unmerged): the start is the result, unchanged
        if os.environ.get("RANK", "0") == "0":  # the first process writes, as below
            write_curve(curve_path, [])
            save_model(model, tokenizer, out_dir)
        return {"train_loss": 0.0, "episodes": 0, "train_tokens_per_s": 0, "bf16": False, "wall_seconds": 0.0}
    rows = [config_hash(row) for row in data]
    # Checkpoints of this exact run only: other parameters, starting weights or data start afresh.
    run_key = config_hash([cfg.model_dump(), weights_hash(model), rows])
    root = checkpoint_dir(out_dir, run_key)
    args = sft_args(cfg, root / STAGING, tokenized="input_ids" in data[0])
    with args.main_process_first(local=False):  # the first process clears partial checkpoints, then all read
        resume = last_checkpoint(root)
    checkpoints = Checkpoints(root, _seconds_before(resume))
    place = {row: i for i, row in enumerate(dict.fromkeys(rows))}  # a row's index among the distinct ones
    distinct = {row: example for row, example in zip(rows, data, strict=True)}.values()
    trainer = AssistantLossTrainer(
        model=model,
        args=args,  # each distinct row tokenized once (the mixture repeats them: passes)
        train_dataset=Dataset.from_list([example | {DISTINCT: i} for i, example in enumerate(distinct)]),
        processing_class=tokenizer,
        peft_config=lora_config(cfg.lora_rank) if cfg.lora_rank else None,
        callbacks=[checkpoints, CurveWriter(curve_path)],
    )
    prepared = trainer.train_dataset  # TRL drops a row left with no target, as it would every copy of it
    kept = {index: position for position, index in enumerate(prepared[DISTINCT])}
    order = [kept[place[row]] for row in rows if place[row] in kept]  # the mixture's order
    trainer.train_dataset = prepared.select(order).remove_columns(DISTINCT)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    wall = checkpoints.seconds()
    history = trainer.state.log_history  # a resumed run's holds the steps before the checkpoint too
    tokens = sum(len(ids) for ids in trainer.train_dataset["input_ids"])
    if trainer.is_world_process_zero():  # the others hold the same weights
        write_curve(curve_path, history)
        save_model(trainer.model, tokenizer, out_dir)
        shutil.rmtree(root.parent, ignore_errors=True)
    return {
        "train_loss": round(mean_loss(history), 4),
        "episodes": len(data),
        "train_tokens_per_s": round(tokens / wall),
        "bf16": args.bf16,
        "wall_seconds": round(wall, 1),
    }
