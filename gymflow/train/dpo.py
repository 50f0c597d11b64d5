"""DPO on token-exact preference pairs, with an NLL term on the chosen side: SWEET-RL's actor update (paper
003, Eq. 4, one reply per pair) and the multi-turn DPO baseline (whole episodes, every reply of each counted).

A `Pair` is two id sequences exactly as the policy sampled them, each with a loss mask: 1 on the ids whose
log-probability counts. log pi(seq) is the sum over those ids only, so a multi-turn episode's observations and
template text between its replies are context, never targets; a per-turn pair is the one-reply case (a prompt
of 0s, then the reply's 1s). The loss per pair (Rafailov et al. 2023; Eq. 4 is this with the log-ratios
written as fractions) plus OpenRLHF's NLL term, which SWEET-RL trains with (`--nll_loss_coef 0.01`, Table 5):

    loss = -log sigma(beta * [(log pi(c) - log pi_ref(c)) - (log pi(r) - log pi_ref(r))]) + nll_coef * NLL(c)

with NLL(c) the chosen sequence's mean negative log-likelihood per counted id; both averaged over the batch's
pairs.

Why by hand and not TRL's DPOTrainer (1.16, checked in the installed package): its collator does take
`prompt_ids`/`chosen_ids`/`rejected_ids`, but the trainer never gives it our ids: `_prepare_dataset` always
runs `extract_prompt` and re-tokenizes text (prompt and prompt+completion separately, cut at their common
prefix, EOS appended by string), so an id row fails and a text row can train on other ids than were sampled;
only overriding that private method feeds it ids. Multi-turn pairs need a mask with several reply spans, which
its prompt/completion rows cannot express (its loss would accept such a `completion_mask`, from a collator of
our own). So a hand-written masked loss was needed anyway; per-turn DPO is its one-reply case, which keeps one
loss, one loop and one checkpoint scheme for both. TRL 1.16 also has no `rpo_alpha`: its NLL term is
`loss_type=["sigmoid", "sft"]`, a token mean over the batch rather than OpenRLHF's per-sequence mean. On the
same 128 per-turn pairs of the tiny default (`benchmarks/dpo_speed.py`) TRL's loss on one batch equals ours
(0.523287 both), and ours trains 1.5x as many pairs per second (12.4 against 8.3, TRL also precomputing
pi_ref).

The reference pi_ref is the starting policy, frozen; its log-probabilities are computed once before training
(the pairs are fixed), so a step is one forward and backward pass of the policy. The LM head and softmax run
only at counted positions. Checkpoints (model, optimizer, schedule, curve) are written whole ten times per run
beside the output, so a stopped run resumes and ends with the weights of one that never stopped.

    pairs = read_turn_pairs(Path("data/sweet/pairs.parquet"))         # gymflow.train.sweet
    train_dpo("data/models/sft", Path("data/models/sweet"), pairs, DPOParams(), Path("data/plots/sweet.csv"))
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, PreTrainedModel, get_cosine_schedule_with_warmup

from gymflow.config import DPOParams
from gymflow.errors import UserError
from gymflow.models.build import load_tokenizer, lora_config
from gymflow.models.files import checkpoint_dir, save_model, weights_hash
from gymflow.progress import bar as progress_bar
from gymflow.rollout.records import config_hash
from gymflow.store.io import write_csv
from gymflow.train.batching import length_chunks
from gymflow.train.draws import iteration_seed
from gymflow.train.logprobs import token_logprobs
from gymflow.train.state import load_parts, load_state, save_run

CHECKPOINTS = 10  # per run, as SFT writes them
# the curve's columns: per logged step, means over the steps since the row before (lr: the step's)
CURVE_FIELDS = ("step", "loss", "dpo_loss", "nll", "reward_margin", "accuracy")
CURVE_FIELDS += ("chosen_reward", "rejected_reward", "grad_norm", "lr")


@dataclass(frozen=True)
class Pair:
    """A preference pair as the learner sees it: each side the ids exactly as sampled and its loss mask (1 on
    the ids that count: the replies)."""

    chosen_ids: list[int]
    chosen_mask: list[int]
    rejected_ids: list[int]
    rejected_mask: list[int]

    def __post_init__(self) -> None:
        for ids, mask in ((self.chosen_ids, self.chosen_mask), (self.rejected_ids, self.rejected_mask)):
            if len(ids) != len(mask) or not any(mask) or mask[0]:
                raise ValueError(
                    "each side of a pair needs one mask value per id, some counted ids, and a first id "
                    "that is context (nothing predicts it)"
                )

    @classmethod
    def reply(cls, prompt: Sequence[int], chosen: Sequence[int], rejected: Sequence[int]) -> Pair:
        """Per-turn DPO's pair: two replies to one context (`prompt`), only the replies counted."""
        context = [0] * len(prompt)
        return cls(
            [*prompt, *chosen],
            context + [1] * len(chosen),
            [*prompt, *rejected],
            context + [1] * len(rejected),
        )

    @property
    def tokens(self) -> int:
        return len(self.chosen_ids) + len(self.rejected_ids)


# ---- the math: pure functions, tested on hand-worked numbers -----------------------------------------------
def sequence_logps(token_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log pi of each sequence: the sum of its ids' log-probabilities where `mask` is 1. [B, T] -> [B]."""
    return (token_logps * mask).sum(-1)


def dpo_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """Eq. 4 per pair: -log sigma(beta * ((chosen - ref_chosen) - (rejected - ref_rejected))), each argument a
    sequence log-probability [P]; returns [P]."""
    return -F.logsigmoid(beta * ((chosen - ref_chosen) - (rejected - ref_rejected)))


def nll_loss(chosen: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The chosen side's mean negative log-likelihood per counted id (OpenRLHF's): -chosen / tokens, [P]."""
    return -chosen / tokens.clamp(min=1)


# ---- forward passes ---------------------------------------------------------------------------------------
def pair_logps(
    model: PreTrainedModel, pairs: Sequence[Pair], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """log pi of each pair's chosen and rejected sequence [P] (one forward pass over both sides), and the
    chosen side's counted ids [P]."""
    ids = [p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs]
    masks = [p.chosen_mask for p in pairs] + [p.rejected_mask for p in pairs]
    logps, counted = token_logprobs(model, ids, masks, pad_id)
    chosen, rejected = sequence_logps(logps, counted).chunk(2)
    return chosen, rejected, counted[: len(pairs)].sum(-1)


def pair_chunks(pairs: Sequence[Pair], order: Sequence[int], max_tokens: int) -> list[list[int]]:
    """`order` cut into forward passes of at most `max_tokens` padded ids, both sides of a pair in the same
    pass (its loss needs both): a pair counts as two rows of its longer side."""
    return length_chunks(
        order, lambda i: 2 * max(len(pairs[i].chosen_ids), len(pairs[i].rejected_ids)), max_tokens
    )


@torch.no_grad()
def reference_logps(
    model: PreTrainedModel, pairs: Sequence[Pair], pad_id: int, max_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """pi_ref's log-probability of every pair's chosen and rejected sequence [P], P = len(pairs)."""
    model.eval()
    chosen, rejected = torch.zeros(len(pairs)), torch.zeros(len(pairs))
    parts = pair_chunks(pairs, range(len(pairs)), max_tokens)
    for part in progress_bar(parts, desc="reference log-probs", unit="pass"):
        c, r, _ = pair_logps(model, [pairs[i] for i in part], pad_id)
        chosen[part], rejected[part] = c, r
    return chosen, rejected


# ---- training -------------------------------------------------------------------------------------------
def schedule(n_pairs: int, cfg: DPOParams) -> list[list[int]]:
    """The run's batches of pair indices: `cfg.epochs` passes, each a fresh seeded permutation (a fractional
    last pass takes the start of its permutation), cut into `cfg.batch_size` pairs."""
    whole, fraction = divmod(cfg.epochs, 1)
    order: list[int] = []
    for epoch in range(int(whole) + (fraction > 0)):
        perm = torch.randperm(
            n_pairs, generator=torch.Generator().manual_seed(iteration_seed(cfg.seed, epoch))
        )
        order += perm.tolist()[: n_pairs if epoch < whole else round(fraction * n_pairs)]
    return [order[i : i + cfg.batch_size] for i in range(0, len(order), cfg.batch_size)]


def train_dpo(
    init_model: str, out_dir: Path, pairs: Sequence[Pair], cfg: DPOParams, curve_path: Path
) -> dict[str, Any]:
    """Train the policy in `init_model` on `pairs` with DPO (pi_ref: its weights, frozen) and save it to
    `out_dir` (merged, if LoRA); the run's summary. Resumes from the run's last checkpoint if there is one."""
    if not pairs:
        raise UserError(
            "no preference pairs to train on: per turn, every turn's candidates tied; per episode, no "
            "task has two episodes with different rewards. Sample more (candidates, samples per task) or "
            "check the critic"
        )
    batches = schedule(len(pairs), cfg)
    if not batches:
        raise UserError(f"epochs {cfg.epochs} of {len(pairs)} pairs is less than one pair: raise epochs")
    tokenizer = load_tokenizer(init_model)
    pad_id = tokenizer.pad_token_id
    model = AutoModelForCausalLM.from_pretrained(init_model, dtype=torch.float32)
    run_key = config_hash([cfg.model_dump(), weights_hash(model), [config_hash(asdict(p)) for p in pairs]])
    checkpoint = checkpoint_dir(out_dir, run_key) / "state.pt"
    start = time.perf_counter()
    ref_chosen, ref_rejected = reference_logps(model, pairs, pad_id, cfg.max_tokens)
    ref_seconds = time.perf_counter() - start
    if cfg.lora_rank:
        from peft import get_peft_model  # only LoRA runs need peft loaded

        torch.manual_seed(cfg.seed)
        model = get_peft_model(model, lora_config(cfg.lora_rank))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    warmup = round(cfg.warmup * len(batches)) if cfg.warmup < 1 else int(cfg.warmup)
    scheduler = get_cosine_schedule_with_warmup(optimizer, warmup, len(batches))
    state = _restore(checkpoint, model, optimizer, scheduler)
    if state["step"]:
        print(f"resuming after step {state['step']} of {len(batches)} from {checkpoint}")
    every = math.ceil(len(batches) / CHECKPOINTS)
    sums: dict[str, float] = {}
    model.train()
    bar = progress_bar(total=len(batches), initial=state["step"], desc="dpo", unit="step")
    session = time.perf_counter()
    for step in range(state["step"] + 1, len(batches) + 1):
        lr = optimizer.param_groups[0]["lr"]
        got = update(model, optimizer, pairs, batches[step - 1], ref_chosen, ref_rejected, cfg, pad_id)
        scheduler.step()
        for k, v in got.items():
            sums[k] = sums.get(k, 0.0) + v
        state["tokens"] += got["tokens"]
        state["pairs"] += len(batches[step - 1])
        bar.update()
        bar.set_postfix(
            loss=f"{got['loss']:.4f}", margin=f"{got['reward_margin']:.3f}", acc=f"{got['accuracy']:.2f}"
        )
        saving = step % every == 0 and step < len(batches)
        if step % cfg.log_every == 0 or saving or step == len(batches):
            steps = sums.pop("steps")
            state["rows"].append(
                {"step": step, **{k: round(v / steps, 6) for k, v in sums.items() if k in CURVE_FIELDS}}
                | {"lr": lr}
            )
            sums = {}
            _write_curve(curve_path, state["rows"])
        if saving:
            state["seconds"] += time.perf_counter() - session
            session = time.perf_counter()
            _save(checkpoint, model, optimizer, scheduler, state | {"step": step})
    bar.close()
    state["seconds"] += time.perf_counter() - session
    _write_curve(curve_path, state["rows"])  # also when the checkpoint held every step
    save_model(model, tokenizer, out_dir)
    shutil.rmtree(checkpoint.parent.parent, ignore_errors=True)
    return summary(state, len(pairs), len(batches), ref_seconds)


def update(
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    pairs: Sequence[Pair],
    batch: Sequence[int],
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    cfg: DPOParams,
    pad_id: int,
) -> dict[str, float]:
    """One optimizer step on the pairs `batch` (their mean loss, accumulated over forward passes of at most
    `max_tokens`); the step's statistics, each a mean over its pairs."""
    optimizer.zero_grad()
    sums = dict.fromkeys(("loss", "dpo_loss", "nll", "reward_margin", "accuracy", "chosen_reward"), 0.0)
    sums |= {"rejected_reward": 0.0, "tokens": 0.0}
    for part in pair_chunks(pairs, batch, cfg.max_tokens):
        chosen, rejected, counted = pair_logps(model, [pairs[i] for i in part], pad_id)
        dpo = dpo_loss(chosen, rejected, ref_chosen[part], ref_rejected[part], cfg.beta)
        nll = nll_loss(chosen, counted)
        loss = dpo + cfg.nll_coef * nll
        (loss.sum() / len(batch)).backward()
        with torch.no_grad():
            chosen_reward = cfg.beta * (chosen - ref_chosen[part])
            rejected_reward = cfg.beta * (rejected - ref_rejected[part])
            margin = chosen_reward - rejected_reward
            for key, value in (("loss", loss), ("dpo_loss", dpo), ("nll", nll), ("reward_margin", margin)):
                sums[key] += float(value.sum())
            sums["accuracy"] += float((margin > 0).sum())
            sums["chosen_reward"] += float(chosen_reward.sum())
            sums["rejected_reward"] += float(rejected_reward.sum())
            sums["tokens"] += sum(pairs[i].tokens for i in part)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm or float("inf"))
    optimizer.step()
    out = {k: v / len(batch) for k, v in sums.items() if k != "tokens"}
    return out | {"grad_norm": float(norm), "tokens": sums["tokens"], "steps": 1.0}


def summary(state: dict[str, Any], n_pairs: int, steps: int, ref_seconds: float) -> dict[str, Any]:
    """The run in a few numbers: the mean loss over all steps, the last curve row's margin and accuracy, and
    speed (training only; the reference pass is `ref_seconds`), a resumed run's earlier sessions included."""
    rows, seconds = state["rows"], state["seconds"]
    logged = [(r["step"] - (rows[i - 1]["step"] if i else 0), r) for i, r in enumerate(rows)]
    last = rows[-1]
    return {
        "pairs": n_pairs,
        "steps": steps,
        "train_loss": round(sum(n * r["loss"] for n, r in logged) / steps, 5),
        "reward_margin": round(last["reward_margin"], 5),
        "accuracy": round(last["accuracy"], 4),
        "nll": round(last["nll"], 5),
        "pairs_per_second": round(state["pairs"] / seconds, 2) if seconds else 0.0,
        "train_tokens_per_s": round(state["tokens"] / seconds) if seconds else 0,
        "reference_seconds": round(ref_seconds, 1),
        "wall_seconds": round(seconds + ref_seconds, 1),
    }


def _write_curve(path: Path, rows: list[dict[str, Any]]) -> None:
    write_csv(path, rows, CURVE_FIELDS)


def _save(path: Path, model, optimizer, scheduler, state: dict[str, Any]) -> None:
    save_run(path, {"model": model, "optimizer": optimizer, "scheduler": scheduler}, state)


def _restore(path: Path, model, optimizer, scheduler) -> dict[str, Any]:
    """The run's bookkeeping after the steps in the checkpoint at `path`, with model, optimizer and schedule
    set to their state then; a fresh run's if there is none. An unreadable checkpoint counts as none."""
    state = load_state(path)
    if state is None:
        return {"step": 0, "rows": [], "seconds": 0.0, "tokens": 0.0, "pairs": 0}
    return load_parts(state, {"model": model, "optimizer": optimizer, "scheduler": scheduler})
