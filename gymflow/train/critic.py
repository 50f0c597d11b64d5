"""SWEET-RL's turn-wise critic (paper 003, section 4.2): a copy of the policy that reads the task's training-time
information (`Env.hidden_text`, e.g. colbench's reference function) before the interaction, which the policy
never sees.

- Input: the hidden block, then the policy's sequence exactly as sampled (`episode_turns`). The block is plain
  text ids ("In light that the final answer is: ...", then a blank line) in front of the policy's own chat
  prompt, as SWEET-RL's code prepends it: the policy's ids follow unchanged, so every reply is scored in the
  context it was sampled in, and the chat turns the policy knows start where they always do. A system message
  would instead change the policy's own first message, or add a second one it never saw.
- Advantage (Eq. 3): A(turn) = mean over the reply's L ids of log pi_theta - log pi_ref, both given hidden +
  context; pi_theta starts as a copy of the policy, pi_ref is a frozen copy. Log-probabilities are computed at
  reply positions only (as `gymflow.train.pg` does).
- Training (Eq. 2): Bradley-Terry on pairs of episodes of the same task ranked by reward,
  J = -log sigma(beta * sum_t A(chosen turn t) - beta * sum_t A(rejected turn t)), plus `nll_coef` times the
  chosen episodes' reply NLL (0 by default; the paper's Table 5 lists 0.01).
- Variants, as switches of one `CriticConfig`: `hidden=False` drops the block (the paper's "w/o training-time
  information"); `kind="value"` puts an MLP head on the last hidden state after each reply, trained with binary
  cross-entropy to predict the episode's success at every turn (the paper's "value function" row); with
  `value_target="reward"` the reward in [0, 1] is its soft label, for data in which nothing succeeds.

    episodes = critic_episodes("data/rollouts/collect", "data/instructions", fmt)
    train_critic("data/models/sft", episodes, CriticConfig(), Path("data/models/critic"))
    critic = load_critic("data/models/critic")
    critic.score([CriticItem(hidden, context_ids, reply_ids), ...])      # one number per turn, higher better
    turn_scores(critic, "hidden", episodes)     # the critic_scores table: which turns it blamed

`score` encodes a context shared by several items (Best-of-N's candidates, the actor's) once and runs the
replies from its cache, so N candidates cost one context and N replies.

Each epoch ends with a checkpoint written whole (beside the output, under the run's key), so a stopped run
resumes at the next epoch and ends with the weights of a run that was never stopped.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel

from gymflow.agent.chat import ChatFormat
from gymflow.config import CriticConfig
from gymflow.envs import ENVS
from gymflow.envs.base import Task, task_rng
from gymflow.errors import UserError
from gymflow.models.build import load_tokenizer, resolve
from gymflow.models.files import checkpoint_dir, weights_hash
from gymflow.progress import bar as progress_bar
from gymflow.rollout.engine import episode_turns
from gymflow.rollout.records import Message, config_hash
from gymflow.store.db import connect
from gymflow.store.io import atomic_dir
from gymflow.train.batching import length_chunks
from gymflow.train.draws import iteration_seed
from gymflow.train.logprobs import chosen_logprobs
from gymflow.train.pg import ValueHead
from gymflow.train.state import load_parts, load_state, save_run

CRITIC_FILE = "critic.json"  # in a critic directory: its config (the variant), so `load_critic` restores it
SEPARATOR = "\n\n"  # after the hidden text, before the policy's first id


@dataclass(frozen=True)
class CriticItem:
    """One turn to score."""

    hidden: (
        str  # the task's training-time information (Env.hidden_text(task)); "" when the variant ignores it
    )
    context_ids: list[
        int
    ]  # the policy's sequence before the reply, exactly as the policy saw it (ChatFormat ids)
    reply_ids: list[int]  # the reply's ids as sampled (its closing eos included, as the engine records them)


@dataclass(frozen=True)
class CriticEpisode:
    """A stored episode as the critic reads it: the policy's ids exactly as sampled and the task's hidden text."""

    episode_id: str
    env: str
    task_id: str
    reward: float
    success: bool
    hidden: str  # Env.hidden_text(task)
    ids: list[int]  # the policy's whole sequence (`episode_turns`)
    turns: list[int]  # per id: the reply it was sampled in (1, 2, ...), 0 for context
    message_index: list[int]  # per reply (1, 2, ...): its `turn` in the turns table (the message's index)

    @property
    def replies(self) -> int:
        return len(self.message_index)


# ---- the math: pure functions, tested on hand-worked numbers ------------------------------------------------
def turn_means(values: torch.Tensor, turns: torch.Tensor, n_turns: int) -> torch.Tensor:
    """Per turn, the mean of `values` over its positions. values, turns: [N] (turns numbered 1..n_turns);
    returns [n_turns]; differentiable in `values`."""
    index = turns.long() - 1
    sums = torch.zeros(n_turns, dtype=values.dtype).index_add(0, index, values)
    counts = torch.zeros(n_turns, dtype=values.dtype).index_add(0, index, torch.ones_like(values))
    return sums / counts


def turn_advantages(logp: torch.Tensor, ref_logp: torch.Tensor, turns: torch.Tensor) -> torch.Tensor:
    """Eq. 3: per turn, the mean over its reply ids of log pi_theta - log pi_ref. logp, ref_logp, turns: [N],
    one entry per reply id (turns numbered 1..T); returns [T]."""
    return turn_means(logp - ref_logp, turns, int(turns.max()))


def bt_loss(chosen: torch.Tensor, rejected: torch.Tensor, beta: float) -> torch.Tensor:
    """Eq. 2, averaged over pairs: -log sigma(beta * (sum_t A_chosen - sum_t A_rejected)). chosen, rejected:
    [P], each episode's sum of turn advantages."""
    return -F.logsigmoid(beta * (chosen - rejected)).mean()


def value_loss(logits: torch.Tensor, success: torch.Tensor) -> torch.Tensor:
    """The value row's classification loss: binary cross-entropy of the success logit predicted after each turn
    against the episode's success (0/1). logits, success: [N turns]."""
    return F.binary_cross_entropy_with_logits(logits, success.to(logits.dtype))


def preference_pairs(
    rewards: Sequence[float], groups: Sequence[Hashable], max_per_group: int, seed: int
) -> list[tuple[int, int]]:
    """(chosen, rejected) index pairs: every two episodes of the same group (task) whose rewards differ, the
    higher-reward one chosen; ties are skipped. A group with more than `max_per_group` pairs keeps a draw seeded
    by (seed, group), so one group's draw does not depend on the others."""
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    out: list[tuple[int, int]] = []
    for g, idx in members.items():
        pairs = [
            (i, j) if rewards[i] > rewards[j] else (j, i)
            for a, i in enumerate(idx)
            for j in idx[a + 1 :]
            if rewards[i] != rewards[j]
        ]
        if len(pairs) > max_per_group:
            pairs = task_rng(seed, g).sample(pairs, max_per_group)
        out += pairs
    return out


# ---- forward passes ---------------------------------------------------------------------------------------
CriticInput = tuple[list[int], list[int]]  # (ids, per-id reply number): a critic input


def _forward(
    model: PreTrainedModel, rows: Sequence[CriticInput], pad_id: int, states: bool = False
) -> list[torch.Tensor]:
    """Per row: the log-probability of each reply id given the ids before it ([reply ids]); or, with `states`,
    the last hidden state at each reply's last id ([replies, H]: the state after the reply). Rows are
    right-padded; the LM head and softmax run at reply positions only."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    reply = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row_ids, row_turns) in enumerate(rows):
        ids[i, : len(row_ids)] = torch.tensor(row_ids)
        mask[i, : len(row_ids)] = 1
        reply[i, : len(row_ids)] = torch.tensor(row_turns)
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    if states:
        last = (reply > 0) & (reply != torch.cat([reply[:, 1:], torch.zeros_like(reply[:, :1])], dim=1))
        where = last.nonzero(as_tuple=True)
        return list(hidden[where].float().split(last.sum(1).tolist()))
    where = (reply > 0).nonzero(as_tuple=True)
    before = hidden[where[0], where[1] - 1]  # the state each reply id was predicted from
    logp, _ = chosen_logprobs(model.lm_head, before, ids[where])
    return list(logp.split((reply > 0).sum(1).tolist()))


def _forward_shared(
    model: PreTrainedModel, prefix: list[int], replies: Sequence[list[int]], pad_id: int, states: bool = False
) -> list[torch.Tensor]:
    """`_forward` of the rows prefix + reply (each reply its row's only turn) for replies that share their prefix
    (Best-of-N's candidates, the actor's): the prefix is encoded once and its cache repeated per reply, so k
    candidates cost one context and k replies instead of k contexts. The same numbers up to float rounding."""
    out = model.model(input_ids=torch.tensor([prefix]), use_cache=True)
    cache, last = out.cache, out.last_hidden_state[0, -1]
    width = max(len(r) for r in replies)
    ids = torch.full((len(replies), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(replies), width), dtype=torch.long)
    for j, reply in enumerate(replies):
        ids[j, : len(reply)] = torch.tensor(reply)
        mask[j, : len(reply)] = 1
    cache.batch_repeat_interleave(len(replies))
    positions = (len(prefix) + torch.arange(width))[None].expand(len(replies), -1)
    full_mask = torch.cat([torch.ones((len(replies), len(prefix)), dtype=torch.long), mask], dim=1)
    hidden = model.model(input_ids=ids, attention_mask=full_mask, position_ids=positions, cache=cache)
    hidden = hidden.last_hidden_state
    if states:
        return [hidden[j, len(r) - 1][None].float() for j, r in enumerate(replies)]
    before = torch.cat([torch.cat([last[None], hidden[j, : len(r) - 1]]) for j, r in enumerate(replies)])
    targets = torch.tensor([i for r in replies for i in r])
    logp, _ = chosen_logprobs(model.lm_head, before, targets)
    return list(logp.split([len(r) for r in replies]))


class TurnCritic:
    """A critic: pi_theta (trained), pi_ref (frozen; advantage) or a value head (value), and how it reads
    hidden information. `score` is what Best-of-N and the actor call."""

    def __init__(
        self,
        model: PreTrainedModel,
        fmt: ChatFormat,
        config: CriticConfig,
        reference: PreTrainedModel | None = None,
        head: nn.Module | None = None,
    ) -> None:
        self.model, self.fmt, self.config = model, fmt, config
        self.reference, self.head = reference, head
        self.pad_id = fmt.tokenizer.pad_token_id
        if config.kind == "advantage" and reference is None:
            raise ValueError("an advantage critic needs its frozen reference model")
        if config.kind == "value" and head is None:
            raise ValueError("a value critic needs its value head")

    @classmethod
    def initial(cls, policy: PreTrainedModel, fmt: ChatFormat, config: CriticConfig) -> TurnCritic:
        """A critic before training: pi_theta a copy of the policy's weights, pi_ref another, frozen (advantage:
        every turn's advantage is then 0); or the copy with a fresh value head, seeded."""
        model = copy.deepcopy(policy).float()
        if config.kind == "value":
            torch.manual_seed(config.seed)
            return cls(model, fmt, config, head=ValueHead(model.config.hidden_size))
        reference = copy.deepcopy(policy).float().eval().requires_grad_(False)
        return cls(model, fmt, config, reference=reference)

    # ---- inputs ------------------------------------------------------------------------------------------
    def hidden_ids(self, hidden: str) -> list[int]:
        """The hidden block's ids (none when the variant reads no hidden information or there is none)."""
        if not self.config.hidden or not hidden:
            return []
        return self.fmt.encode(hidden + SEPARATOR)[: self.config.max_hidden_tokens]

    def sequence(self, hidden: str, ids: Sequence[int], turns: Sequence[int]) -> CriticInput:
        """The critic's input for a policy sequence: the hidden block, then the policy's ids unchanged."""
        block = self.hidden_ids(hidden)
        return block + list(ids), [0] * len(block) + list(turns)

    def item_sequence(self, item: CriticItem) -> CriticInput:
        if not item.reply_ids:
            raise ValueError("a critic item needs the reply's ids")
        if not item.context_ids:
            raise ValueError("a critic item needs the context the reply continues")
        turns = [0] * len(item.context_ids) + [1] * len(item.reply_ids)
        return self.sequence(item.hidden, item.context_ids + item.reply_ids, turns)

    # ---- per-turn values -------------------------------------------------------------------------------
    def reference_logp(self, rows: Sequence[CriticInput]) -> list[torch.Tensor]:
        """pi_ref's log-probability of every reply id of each row (frozen: computed once per episode)."""
        out: list[torch.Tensor | None] = [None] * len(rows)
        with torch.no_grad():
            for chunk in length_chunks(range(len(rows)), lambda i: len(rows[i][0]), self.config.max_tokens):
                for i, lp in zip(
                    chunk, _forward(self.reference, [rows[i] for i in chunk], self.pad_id), strict=True
                ):
                    out[i] = lp
        return out

    def turn_values(
        self, rows: Sequence[CriticInput], ref_logp: Sequence[torch.Tensor] | None = None
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per row, one value per reply ([replies]): its advantage (Eq. 3) or its success logit; and the
        row's reply log-probabilities under pi_theta (for the NLL term; empty for the value head). Carries the
        gradient when called with grad enabled; `ref_logp` are pi_ref's, computed here if not given."""
        values: list[torch.Tensor | None] = [None] * len(rows)
        logps: list[torch.Tensor | None] = [None] * len(rows)
        if self.config.kind == "advantage" and ref_logp is None:
            ref_logp = self.reference_logp(rows)
        for chunk in length_chunks(range(len(rows)), lambda i: len(rows[i][0]), self.config.max_tokens):
            part = [rows[i] for i in chunk]
            if self.config.kind == "value":
                for i, h in zip(chunk, _forward(self.model, part, self.pad_id, states=True), strict=True):
                    values[i], logps[i] = self.head(h), h.new_zeros(0)
                continue
            for i, lp in zip(chunk, _forward(self.model, part, self.pad_id), strict=True):
                turns = torch.tensor([t for t in rows[i][1] if t > 0])
                values[i], logps[i] = turn_advantages(lp, ref_logp[i], turns), lp
        return values, logps

    @torch.no_grad()
    def score(self, items: Sequence[CriticItem]) -> list[float]:
        """One number per item: the turn's advantage (Eq. 3: mean over the reply's tokens of log pi_theta -
        log pi_ref, given hidden + context), or for the value variant the predicted success logit after the
        reply. Higher is better; batched; no grad."""
        if not items:
            return []
        self.model.eval()
        rows = [self.item_sequence(item) for item in items]
        shared: dict[tuple[int, ...], list[int]] = {}  # the items of each context: one encoding each
        for i, (ids, turns) in enumerate(rows):
            shared.setdefault(tuple(ids[: turns.index(1)]), []).append(i)
        out: list[float] = [0.0] * len(items)
        singles = [idx[0] for idx in shared.values() if len(idx) == 1]
        if singles:
            values, _ = self.turn_values([rows[i] for i in singles])
            for i, v in zip(singles, values, strict=True):
                out[i] = float(v[0])
        for prefix, idx in shared.items():
            if len(idx) > 1:
                for i, v in zip(
                    idx, self._shared_values(list(prefix), [items[i].reply_ids for i in idx]), strict=True
                ):
                    out[i] = v
        return out

    def _shared_values(self, prefix: list[int], replies: list[list[int]]) -> list[float]:
        """`score`'s numbers for replies that continue the same critic input `prefix`."""
        if self.config.kind == "value":
            states = _forward_shared(self.model, prefix, replies, self.pad_id, states=True)
            return [float(self.head(h)[0]) for h in states]
        logp = _forward_shared(self.model, prefix, replies, self.pad_id)
        ref = _forward_shared(self.reference, prefix, replies, self.pad_id)
        return [float((a - b).mean()) for a, b in zip(logp, ref, strict=True)]

    @torch.no_grad()
    def score_episodes(self, episodes: Sequence[CriticEpisode]) -> list[list[float]]:
        """Every reply of each episode scored in one pass over its whole sequence (the same numbers as
        `score` on each turn with its context: causal attention sees nothing after the reply)."""
        self.model.eval()
        values, _ = self.turn_values([self.sequence(e.hidden, e.ids, e.turns) for e in episodes])
        return [v.tolist() for v in values]


def turn_scores(critic: TurnCritic, name: str, episodes: Sequence[CriticEpisode]) -> list[dict[str, Any]]:
    """The `critic_scores` table's rows: one per assistant turn of `episodes`, keyed as the turns table is
    (episode_id, turn: the message's index), with critic_score (`TurnCritic.score`'s number for that reply in
    its context) and the turn's advantage: Eq. 3's, which is the score itself, or for a value critic the
    change in predicted success the reply made (none for the first reply: no value before it)."""
    rows = []
    for ep, scores in zip(episodes, critic.score_episodes(episodes), strict=True):
        before = None
        for turn, score in zip(ep.message_index, scores, strict=True):
            if critic.config.kind == "advantage":
                advantage = score
            else:
                advantage = None if before is None else score - before
            rows.append(
                {"critic": name, "episode_id": ep.episode_id, "turn": turn}
                | {"critic_score": score, "advantage": advantage}
            )
            before = score
    return rows


# ---- data ---------------------------------------------------------------------------------------------
def critic_episodes(
    rollout_dir: str | Path, instructions_dir: str | Path, fmt: ChatFormat
) -> list[CriticEpisode]:
    """The episodes of a rollout folder (`play` / `write_episodes` tables) with their ids rebuilt token for token
    from the stored reply ids, and each task's hidden text from the instruction table. Episodes without sampled
    ids (an expert's) are skipped: the critic scores what a policy sampled."""
    db = connect(rollout_dir)
    rows = db.execute(
        "select episode_id, env, task_id, reward, success from episodes order by env, task_id, episode_id"
    ).fetchall()
    turns = db.execute(
        "select episode_id, turn, role, text, token_ids from turns order by episode_id, turn"
    ).fetchall()
    messages: dict[str, list[tuple[int, Message]]] = {}
    for episode_id, turn, role, text, token_ids in turns:
        messages.setdefault(episode_id, []).append((turn, Message(role, text, token_ids=token_ids or [])))
    tasks = _tasks(instructions_dir, {(env, task) for _, env, task, _, _ in rows})
    out, skipped = [], 0
    for episode_id, env, task_id, reward, success in rows:
        msgs = messages.get(episode_id, [])
        replies = [i for i, m in msgs if m.role == "assistant"]
        if not replies or any(not m.token_ids for _, m in msgs if m.role == "assistant"):
            skipped += 1
            continue
        ids, id_turns = episode_turns([m for _, m in msgs], fmt)
        hidden = ENVS[env].hidden_text(tasks[env, task_id])
        out.append(
            CriticEpisode(
                episode_id, env, task_id, float(reward), bool(success), hidden, ids, id_turns, replies
            )
        )
    if skipped:
        print(f"{rollout_dir}: {skipped} episodes without sampled ids skipped")
    return out


def _tasks(instructions_dir: str | Path, wanted: set[tuple[str, str]]) -> dict[tuple[str, str], Task]:
    """The tasks `wanted` (env, task_id) from the instruction table; a missing one is a one-line error."""
    db = connect(instructions_dir)
    rows = db.sql("select * from tasks").to_arrow_table().to_pylist()
    found = {(r["env"], r["task_id"]): Task.from_row(r) for r in rows if (r["env"], r["task_id"]) in wanted}
    missing = sorted(wanted - found.keys())
    if missing:
        env, task = missing[0]
        raise UserError(
            f"{len(missing)} episodes' tasks are not in {instructions_dir} (first: {env}/{task}): the rollouts "
            "come from other instructions; rerun the stage that played them"
        )
    return found


# ---- training -------------------------------------------------------------------------------------------
def train_critic(
    policy_dir: str | Path, episodes: Sequence[CriticEpisode], config: CriticConfig, out_dir: Path
) -> dict[str, Any]:
    """Train a critic from the policy in `policy_dir` on `episodes` and save it to `out_dir` (`load_critic`
    reads it back); per-epoch statistics and the run's summary."""
    tokenizer = load_tokenizer(policy_dir)
    policy = AutoModelForCausalLM.from_pretrained(resolve(policy_dir), dtype=torch.float32)
    critic = TurnCritic.initial(policy, ChatFormat(tokenizer), config)
    data = [(e.episode_id, e.reward, e.success, len(e.ids)) for e in episodes]
    run_key = config_hash([config.model_dump(), weights_hash(policy), data])
    rows = fit(critic, episodes, checkpoint_dir(out_dir, run_key) / "state.pt")
    save_critic(critic, out_dir, {"policy_hash": weights_hash(policy), "episodes": len(episodes)})
    shutil.rmtree(checkpoint_dir(out_dir, run_key).parent, ignore_errors=True)
    return {"epochs": rows, **summary(rows)}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The run in a few numbers: the last epoch's loss and accuracy, and speed over every epoch."""
    last = rows[-1]
    seconds = sum(r["seconds"] for r in rows)
    return {
        "loss": last["loss"],
        "accuracy": last["accuracy"],
        "examples": last["examples"],
        "examples_per_s": round(sum(r["examples"] for r in rows) / seconds, 2) if seconds else 0.0,
        "train_tokens_per_s": round(sum(r["tokens"] for r in rows) / seconds) if seconds else 0,
    }


def fit(critic: TurnCritic, episodes: Sequence[CriticEpisode], checkpoint: Path) -> list[dict[str, Any]]:
    """`config.epochs` passes of AdamW over the pairs (advantage) or episodes (value), a checkpoint after each
    epoch; resumes from `checkpoint` if it holds earlier epochs. Returns one row of statistics per epoch."""
    cfg = critic.config
    params = [{"params": [p for p in critic.model.parameters() if p.requires_grad], "lr": cfg.lr}]
    if critic.head is not None:
        params.append({"params": list(critic.head.parameters()), "lr": cfg.head_lr})
    optimizer = torch.optim.AdamW(params, weight_decay=0.0)
    rows = _restore(checkpoint, critic, optimizer)
    if rows:
        print(f"resuming after epoch {len(rows)} from {checkpoint}")
    seqs = [critic.sequence(e.hidden, e.ids, e.turns) for e in episodes]
    if cfg.kind == "advantage":
        pairs = preference_pairs(
            [e.reward for e in episodes],
            [(e.env, e.task_id) for e in episodes],
            cfg.max_pairs_per_task,
            cfg.seed,
        )
        if not pairs:
            raise UserError(
                "no pair of episodes of one task with different rewards to train the critic on: collect more "
                "samples per task (or train the value variant, kind: value)"
            )
        units: list[Any] = pairs
        ref = critic.reference_logp(seqs)  # pi_ref is frozen: once for the whole run
    else:
        units, ref = list(range(len(episodes))), None
    for epoch in range(len(rows) + 1, cfg.epochs + 1):
        start = time.perf_counter()
        order = torch.randperm(
            len(units), generator=torch.Generator().manual_seed(iteration_seed(cfg.seed, epoch))
        )
        sums = dict.fromkeys(("loss", "correct", "judged", "tokens", "steps"), 0.0)
        bar = progress_bar(
            range(0, len(units), cfg.batch), desc=f"critic epoch {epoch}/{cfg.epochs}", unit="step"
        )
        critic.model.train()
        for first in bar:
            batch = [units[i] for i in order[first : first + cfg.batch].tolist()]
            step = _bt_step if cfg.kind == "advantage" else _value_step
            got = step(critic, episodes, seqs, ref, batch)
            if cfg.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_([p for g in params for p in g["params"]], cfg.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
            for k, v in got.items():
                sums[k] += v
            sums["steps"] += 1
            bar.set_postfix(loss=f"{got['loss']:.4f}")
        bar.close()
        rows.append(
            {
                "epoch": epoch,
                "loss": round(sums["loss"] / max(sums["steps"], 1), 5),
                "accuracy": round(sums["correct"] / max(sums["judged"], 1), 4),
                "examples": len(units),
                "tokens": int(sums["tokens"]),
                "seconds": time.perf_counter() - start,
            }
        )
        _save(checkpoint, critic, optimizer, rows)
        print(
            f"critic epoch {epoch}/{cfg.epochs}: loss {rows[-1]['loss']:.4f} accuracy {rows[-1]['accuracy']:.3f}"
        )
    critic.model.eval()
    return rows


def _bt_step(
    critic: TurnCritic,
    episodes: Sequence[CriticEpisode],
    seqs: Sequence[CriticInput],
    ref: Sequence[torch.Tensor],
    pairs: Sequence[tuple[int, int]],
) -> dict[str, float]:
    """Accumulate Eq. 2's gradient over `pairs` (plus the chosen replies' NLL); the step's statistics."""
    needed = sorted({i for pair in pairs for i in pair})
    where = {i: k for k, i in enumerate(needed)}
    values, logps = critic.turn_values([seqs[i] for i in needed], [ref[i] for i in needed])
    sums = torch.stack([v.sum() for v in values])
    chosen = sums[[where[c] for c, _ in pairs]]
    rejected = sums[[where[r] for _, r in pairs]]
    loss = bt_loss(chosen, rejected, critic.config.beta)
    if critic.config.nll_coef > 0:
        nll = -torch.cat([logps[where[c]] for c in dict.fromkeys(c for c, _ in pairs)]).mean()
        loss = loss + critic.config.nll_coef * nll
    loss.backward()
    return {
        "loss": float(loss.detach()),
        "correct": float((chosen > rejected).sum()),
        "judged": float(len(pairs)),
        "tokens": float(sum(len(seqs[i][0]) for i in needed)),
    }


def _value_step(
    critic: TurnCritic,
    episodes: Sequence[CriticEpisode],
    seqs: Sequence[CriticInput],
    ref: None,
    batch: Sequence[int],
) -> dict[str, float]:
    """Accumulate the BCE gradient of every turn's logit over the episodes `batch`: against the episode's
    success, or its reward as a soft label (`value_target`)."""
    values, _ = critic.turn_values([seqs[i] for i in batch])
    logits = torch.cat(values)
    target = [
        float(episodes[i].success if critic.config.value_target == "success" else episodes[i].reward)
        for i in batch
    ]
    success = torch.cat([torch.full((len(v),), t) for t, v in zip(target, values, strict=True)])
    loss = value_loss(logits, success)
    loss.backward()
    return {
        "loss": float(loss.detach()),
        "correct": float(((logits.detach() > 0) == (success > 0.5)).sum()),
        "judged": float(len(logits)),
        "tokens": float(sum(len(seqs[i][0]) for i in batch)),
    }


def _parts(critic: TurnCritic, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    parts = {"model": critic.model, "optimizer": optimizer}
    return parts | ({"head": critic.head} if critic.head is not None else {})


def _save(
    path: Path, critic: TurnCritic, optimizer: torch.optim.Optimizer, rows: list[dict[str, Any]]
) -> None:
    save_run(path, _parts(critic, optimizer), {"rows": rows})


def _restore(path: Path, critic: TurnCritic, optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """The rows of the epochs in the checkpoint at `path`, the critic and optimizer set to their state after them;
    none if there is none. An unreadable checkpoint counts as none: the run starts afresh."""
    state = load_state(path)
    return [] if state is None else load_parts(state, _parts(critic, optimizer))["rows"]


# ---- a critic on disk -------------------------------------------------------------------------------------
def save_critic(critic: TurnCritic, out_dir: Path, extra: dict[str, Any] | None = None) -> None:
    """A critic directory, written whole or not at all: `critic.json` (its config: the variant), `model/`
    (pi_theta, with the tokenizer), and `reference/` (pi_ref) or `value_head.pt`."""
    meta = {"config": critic.config.model_dump(), "weights_hash": weights_hash(critic.model), **(extra or {})}
    with atomic_dir(out_dir) as tmp:
        critic.model.save_pretrained(tmp / "model")
        critic.fmt.tokenizer.save_pretrained(tmp / "model")
        if critic.reference is not None:
            critic.reference.save_pretrained(tmp / "reference")
        if critic.head is not None:
            torch.save(critic.head.state_dict(), tmp / "value_head.pt")
        (tmp / CRITIC_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def critic_hash(critic: TurnCritic) -> str:
    """Names a critic exactly: its variant and its trained weights (the LM's and, for a value critic, the head's)."""
    head = [t.tolist() for t in critic.head.state_dict().values()] if critic.head is not None else None
    return config_hash([critic.config.model_dump(), weights_hash(critic.model), head])


def load_critic(path: str | Path) -> TurnCritic:
    """The critic a `train_critic` run saved at `path`, in its variant, ready to score (eval mode, no grad)."""
    path = Path(path)
    if not (path / CRITIC_FILE).is_file():
        raise UserError(f"no critic in {path}: run the critic stage first")
    meta = json.loads((path / CRITIC_FILE).read_text())
    config = CriticConfig.model_validate(meta["config"])
    fmt = ChatFormat(load_tokenizer(path / "model"))
    model = AutoModelForCausalLM.from_pretrained(path / "model", dtype=torch.float32).eval()
    reference = head = None
    if config.kind == "advantage":
        reference = AutoModelForCausalLM.from_pretrained(path / "reference", dtype=torch.float32)
        reference = reference.eval().requires_grad_(False)
    else:
        head = ValueHead(model.config.hidden_size)
        head.load_state_dict(torch.load(path / "value_head.pt", weights_only=True))
        head.eval()
    return TurnCritic(model, fmt, config, reference=reference, head=head)
