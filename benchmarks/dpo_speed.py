"""What SWEET-RL's actor and the multi-turn DPO baseline cost on this CPU at the default tiny sizes
(params.yaml's `model`: hidden 128, 2 layers, vocab 2048), and TRL's DPOTrainer against our DPO on the same
pairs.

1. Candidates per turn (`gymflow.train.sweet.build_turn_pairs`): 16 replies sampled from the policy for each
   turn of the offline data, scored by an advantage critic (`TurnCritic`, pi_theta nudged off pi_ref so scores
   differ). The policy is the randomly initialised tiny model: it rarely closes a reply, so each candidate
   runs to `--max-new-tokens`, the most a turn can cost.
2. DPO training (`gymflow.train.dpo.train_dpo`, as the stages run it): pairs and ids per second, on per-turn
   pairs (an expert reply against another turn's, after the shared context) and on whole-episode pairs (an
   expert episode against a copy whose submission is wrong), and the one reference pass before training.
3. TRL 1.16's DPOTrainer on the same per-turn pairs (its `_prepare_dataset` skipped so it takes our ids;
   reference log-probs precomputed, as ours; NLL as `loss_type=["sigmoid", "sft"]`): pairs per second against
   ours (the ratio), and both losses on one batch with a reference moved off the policy (sigmoid only: TRL's
   NLL is a token mean over the batch, ours a per-pair mean).

Data: colbench expert episodes as if sampled (each reply's ids its text's, closed by eos), lengths like an SFT
agent's. Ours and TRL's take turns `--repeats` times from the same starting weights (the median is reported),
so a load that comes and goes falls on both alike; `--threads` torch threads (1 by default: on 2 shared cores,
two threads made the tiny model's sampling 100x slower here).

    python benchmarks/dpo_speed.py                        # about 3 minutes on 2 busy cores
    python benchmarks/dpo_speed.py --turns 8 --pairs 64 --repeats 1
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import DPOConfig, DPOTrainer

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig
from gymflow.envs import make_env
from gymflow.envs.colbench import ColBench
from gymflow.envs.instructions import build_splits
from gymflow.models.build import build_model, load_tokenizer
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout.engine import SamplingConfig, episode_turns
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import Episode
from gymflow.train.critic import CriticConfig, CriticEpisode, TurnCritic
from gymflow.train.dpo import DPOParams, Pair, dpo_loss, pair_logps, train_dpo
from gymflow.train.sweet import CandidateParams, build_turn_pairs, episode_pair


class TokenDPOTrainer(DPOTrainer):
    """TRL's DPOTrainer fed rows of ids as they are: its own preparation always re-tokenizes text."""

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        return dataset


def as_sampled(ep: Episode, fmt: ChatFormat, spoil: bool = False) -> CriticEpisode:
    """An expert episode as a policy's stored episode; `spoil`: its last submission wrong, reward 0."""
    messages = [dataclasses.replace(m) for m in ep.messages]
    replies = [m for m in messages if m.role == "assistant"]
    if spoil:
        replies[-1].text = "Thought: I guess.\nAction: submit\ndef f():\n    return 0"
    for m in replies:
        m.token_ids = fmt.encode(m.text) + [fmt.eos_id]
    ids, turns = episode_turns(messages, fmt)
    index = [i for i, m in enumerate(messages) if m.role == "assistant"]
    reward = 0.0 if spoil else ep.reward
    t = ep.task
    name = f"{t.task_id}/{int(spoil)}"
    return CriticEpisode(
        name, t.env, t.task_id, reward, reward == 1.0, ColBench.hidden_text(t), ids, turns, index
    )


def per_turn_pairs(episodes: list[CriticEpisode], n: int, seed: int) -> list[Pair]:
    """`n` one-reply pairs: a turn's expert reply against another turn's, after the first one's context."""
    turns = [
        (e.ids[: e.turns.index(r)], [i for i, t in zip(e.ids, e.turns, strict=True) if t == r])
        for e in episodes
        for r in range(1, e.replies + 1)
    ]
    rng = random.Random(seed)
    return [
        Pair.reply(ctx, reply, rng.choice(turns)[1]) for ctx, reply in rng.sample(turns, min(n, len(turns)))
    ]


def ours(start: Path, pairs: list[Pair], cfg: DPOParams, out: Path) -> dict:
    return train_dpo(str(start), out / "model", pairs, cfg, out / "curve.csv")


def trl(start: Path, pairs: list[Pair], cfg: DPOParams, out: Path) -> dict:
    """TRL's DPOTrainer over the same pairs: pairs per second of `train` (the reference pass timed apart)."""
    rows = [_trl_row(p) for p in pairs]
    args = _trl_args(cfg, out, precompute=True, loss=["sigmoid", "sft"], weights=[1.0, cfg.nll_coef])
    start_ref = time.perf_counter()
    trainer = TokenDPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(start),
        ref_model=AutoModelForCausalLM.from_pretrained(start),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=load_tokenizer(start),
    )
    ref_seconds = time.perf_counter() - start_ref
    began = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - began
    return {
        "pairs_per_second": round(len(pairs) / seconds, 2),
        "train_tokens_per_s": round(sum(p.tokens for p in pairs) / seconds),
        "reference_seconds": round(ref_seconds, 1),
        "train_loss": round(result.training_loss, 5),
    }


def _trl_row(p: Pair) -> dict:
    n = p.chosen_mask.index(1)
    return {
        "prompt_ids": p.chosen_ids[:n],
        "chosen_ids": p.chosen_ids[n:],
        "rejected_ids": p.rejected_ids[n:],
    }


def _trl_args(
    cfg: DPOParams, out: Path, precompute: bool, loss: list[str], weights: list[float]
) -> DPOConfig:
    return DPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        lr_scheduler_type="cosine",
        warmup_steps=cfg.warmup,
        weight_decay=0.0,
        max_grad_norm=cfg.max_grad_norm,
        beta=cfg.beta,
        loss_type=loss,
        loss_weights=weights,
        num_train_epochs=cfg.epochs,
        precompute_ref_log_probs=precompute,
        max_length=None,
        gradient_checkpointing=False,
        bf16=False,
        use_cpu=True,
        seed=cfg.seed,
        save_strategy="no",
        logging_steps=10**6,
        report_to=[],
        disable_tqdm=True,
    )


def same_batch_losses(start: Path, pairs: list[Pair], cfg: DPOParams, out: Path) -> tuple[float, float]:
    """Ours and TRL's DPO loss (sigmoid, no NLL) on one batch, with the reference moved off the policy."""
    model = AutoModelForCausalLM.from_pretrained(start).eval()
    reference = AutoModelForCausalLM.from_pretrained(start).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
    tokenizer = load_tokenizer(start)
    with torch.no_grad():
        c, r, _ = pair_logps(model, pairs, tokenizer.pad_token_id)
        rc, rr, _ = pair_logps(reference, pairs, tokenizer.pad_token_id)
        mine = float(dpo_loss(c, r, rc, rr, cfg.beta).mean())
    trainer = TokenDPOTrainer(
        model=model,
        ref_model=reference,
        args=_trl_args(cfg, out, precompute=False, loss=["sigmoid"], weights=[1.0]),
        train_dataset=Dataset.from_list([_trl_row(p) for p in pairs]),
        processing_class=tokenizer,
    )
    batch = trainer.data_collator([_trl_row(p) for p in pairs])
    with torch.no_grad():
        theirs = float(trainer.compute_loss(trainer.model.eval(), batch))
    return mine, theirs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=64, help="colbench train tasks (expert episodes)")
    parser.add_argument("--turns", type=int, default=16, help="turns to sample 16 candidates for")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=64, help="sequences sampled at once (4 turns x 16)")
    parser.add_argument("--pairs", type=int, default=128, help="per-turn pairs trained on per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, {args.threads} torch thread(s)")

    tasks = build_splits(ColBench, args.tasks, 0, seed=0)["train"]
    env = make_env("colbench")
    experts = [run_expert(env, t) for t in tasks]
    texts = [m.text for ep in experts for m in ep.messages] + [ColBench.hidden_text(t) for t in tasks]
    tokenizer = train_tokenizer(texts, ModelConfig().vocab_size)
    fmt = ChatFormat(tokenizer)
    policy = build_model(ModelConfig(), tokenizer)
    episodes = [as_sampled(ep, fmt) for ep in experts]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        start = tmp / "policy"
        policy.save_pretrained(start)
        tokenizer.save_pretrained(start)
        params = sum(p.numel() for p in policy.parameters())
        lengths = [len(e.ids) for e in episodes]
        print(
            f"policy {params / 1e6:.2f}M parameters; episodes {statistics.mean(lengths):.0f} ids on average"
        )

        # 1. candidates per turn
        critic = TurnCritic.initial(policy, fmt, CriticConfig())
        with torch.no_grad():
            for p in critic.model.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 0.05)
        cand = CandidateParams(candidates=16, turns=args.turns)
        got = build_turn_pairs(
            policy,
            fmt,
            critic,
            episodes,
            cand,
            SamplingConfig(
                temperature=cand.temperature, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size
            ),
            tmp / "pairs.parquet",
            "b",
        )
        turns = got["turns"]
        print(
            f"\n1. candidates: {turns} turns x 16, up to {args.max_new_tokens} new ids each: "
            f"sampling {got['sampling_seconds'] / turns:.2f} s/turn "
            f"({got['candidate_tokens_per_s']} ids/s), "
            f"critic scoring {got['scoring_seconds'] / turns:.2f} s/turn; {got['pairs']} pairs "
            f"(score gap {got['score_gap']})"
        )

        # 2. and 3. DPO training: ours on per-turn and episode pairs, TRL's on per-turn pairs, taking turns
        turn_pairs = per_turn_pairs(episodes, args.pairs, seed=0)
        spoiled = [as_sampled(ep, fmt, spoil=True) for ep in experts]
        episode_pairs = [episode_pair(good, bad) for good, bad in zip(episodes, spoiled, strict=True)]
        cfg = DPOParams(lr=1e-4, epochs=1, batch_size=8, warmup=0, log_every=10**6)
        rows: dict[str, list[dict]] = {"ours, per-turn": [], "TRL, per-turn": [], "ours, episodes": []}
        for r in range(args.repeats):
            rows["ours, per-turn"].append(ours(start, turn_pairs, cfg, tmp / f"ours{r}"))
            rows["TRL, per-turn"].append(trl(start, turn_pairs, cfg, tmp / f"trl{r}"))
            rows["ours, episodes"].append(ours(start, episode_pairs, cfg, tmp / f"episodes{r}"))
        n_turn = sum(p.tokens for p in turn_pairs) / len(turn_pairs)
        n_episode = sum(p.tokens for p in episode_pairs) / len(episode_pairs)
        print(
            f"\n2./3. DPO, batch 8, median of {args.repeats} (ids per pair: per-turn {n_turn:.0f}, "
            f"episodes {n_episode:.0f})"
        )
        print(f"{'':16s} {'pairs/s':>8s} {'ids/s':>8s} {'ref pass s':>10s} {'train loss':>10s}")
        medians = {}
        for name, runs in rows.items():
            med = {
                k: statistics.median(run[k] for run in runs)
                for k in ("pairs_per_second", "train_tokens_per_s")
            }
            ref = statistics.median(run["reference_seconds"] for run in runs)
            medians[name] = med["pairs_per_second"]
            print(
                f"{name:16s} {med['pairs_per_second']:8.2f} {med['train_tokens_per_s']:8.0f} {ref:10.1f} "
                f"{runs[-1]['train_loss']:10.4f}"
            )
        print(f"ours / TRL on per-turn pairs: {medians['ours, per-turn'] / medians['TRL, per-turn']:.2f}x")
        mine, theirs = same_batch_losses(start, turn_pairs[:8], cfg, tmp / "same")
        print(f"one batch, reference moved off the policy: our loss {mine:.6f}, TRL's {theirs:.6f}")


if __name__ == "__main__":
    main()
