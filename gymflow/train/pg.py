"""The policy-gradient learner: one trainer whose switches (`gymflow.train.presets.PGSwitches`) make LOOP, RLOO, GRPO,
REINFORCE++ and PPO with a value head.

It sees episodes as token sequences exactly as they were sampled (`Rollout`): context ids carry no loss, each
reply's ids carry the loss. An update (`PolicyGradient.step`) is LOOP Algorithm 1, lines 5-9:
1. the learner recomputes the log-probabilities of the sampled tokens under the weights that sampled them
   (the PPO denominator; LOOP App. D), and under the frozen reference if there is a KL term;
2. advantages from the rewards of each task's group (or a value head and GAE), and episodes with
   |A| < `min_abs_advantage` are dropped;
3. `epochs` passes of `minibatches` clipped gradient steps over the shuffled episodes, each step's
   episodes split into forward passes of at most `max_tokens`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import PreTrainedModel

from gymflow.train.advantages import gae, group_normalized, leave_one_out, reinforce_pp
from gymflow.train.pg_loss import clipped_objective, kl_penalty, unit_ids
from gymflow.train.presets import PGSwitches


@dataclass
class Rollout:
    """One episode as the learner sees it."""

    ids: list[int]  # the whole sequence the sampler fed and produced
    turns: list[int]  # per id: the reply it was sampled in (1, 2, ...), 0 for context
    reward: float
    group: int  # episodes of the same task in the same iteration share a group
    sampled_logp: list[float] = field(default_factory=list)  # the sampler's, per reply id (diagnostics only)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.turns) or not any(self.turns) or self.turns[0]:
            raise ValueError("a rollout needs one reply number per id, some reply ids, and context first")


class ValueHead(nn.Module):
    """LOOP C.5's critic: an MLP on the policy's last hidden state (detached: value gradients never reach
    the policy), its prediction clipped to the reward range [0, 1] where advantages are computed."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden // 2), nn.ReLU()
        )
        self.out = nn.Linear(hidden // 2, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(self.net(h)).squeeze(-1)


@dataclass
class Prepared:
    """An iteration's rollouts with everything the update needs, one tensor per kept rollout."""

    rollouts: list[Rollout]
    old_logp: list[torch.Tensor]  # per id (0 at context), under the sampling weights
    advantages: list[torch.Tensor]  # per id (0 at context)
    returns: list[torch.Tensor] | None  # value targets per id (gae)
    ref_logp: list[torch.Tensor] | None
    stats: dict[str, float]


class PolicyGradient:
    def __init__(
        self,
        model: PreTrainedModel,
        switches: PGSwitches,
        lr: float,
        temperature: float = 1.0,
        max_tokens: int = 16384,
        pad_id: int = 0,
        seed: int = 0,
        warmup: int = 0,
    ) -> None:
        self.model, self.sw, self.temperature = model, switches, temperature
        self.max_tokens, self.pad_id = max_tokens, pad_id
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=0.0)
        # Linear warm-up over the first `warmup` steps: Adam's first steps move every weight by about lr,
        # whatever its gradient's size, and that is where the KL to the sampler jumped.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
        )
        self.reference = None
        if switches.kl_coef > 0 and not hasattr(model, "disable_adapter"):  # LoRA: the base is the reference
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.value = self.value_optimizer = None
        if switches.advantage == "gae":
            self.value = ValueHead(model.config.hidden_size)
            self.value_optimizer = torch.optim.AdamW(self.value.parameters(), lr=switches.value_lr)
        self.generator = torch.Generator().manual_seed(seed)
        self.value_warm = switches.value_warmup == 0

    # ---- forward passes ---------------------------------------------------------------------------
    def _forward(
        self,
        model: nn.Module,
        rows: Sequence[Rollout],
        hidden: bool = False,
        temperature: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Per position [B, T], 0 except at reply ids: the log-probability of the id given the ids before it,
        and the entropy of the distribution it was drawn from; the last hidden state it was predicted from
        ([B, T, H], for values); and the mask of real ids. The LM head and softmax run at reply positions
        only: most of a multi-turn sequence is context, and the full-vocabulary softmax is costly on CPU."""
        width = max(len(r.ids) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        reply = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, r in enumerate(rows):
            ids[i, : len(r.ids)] = torch.tensor(r.ids)
            mask[i, : len(r.ids)] = 1
            reply[i, : len(r.ids)] = torch.tensor(r.turns) > 0
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        states = causal_lm.model(input_ids=ids, attention_mask=mask).last_hidden_state
        where = reply.nonzero(as_tuple=True)
        before = states[where[0], where[1] - 1]  # the state each reply id was predicted from
        logp_all = (causal_lm.lm_head(before).float() / (temperature or self.temperature)).log_softmax(-1)
        logp = logp_all.gather(-1, ids[where][:, None]).squeeze(-1)
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        shape = (len(rows), width)
        h = None
        if hidden:
            h = torch.zeros(*shape, states.shape[-1]).index_put(where, before.detach().float())
        return (
            torch.zeros(shape).index_put(where, logp),
            torch.zeros(shape).index_put(where, entropy),
            h,
            mask,
        )

    def _chunks(self, order: Sequence[int], rollouts: Sequence[Rollout]) -> Iterator[list[int]]:
        """`order` cut into forward passes of at most `max_tokens` padded ids, similar lengths together."""
        chunk: list[int] = []
        for i in sorted(order, key=lambda i: len(rollouts[i].ids)):
            if chunk and (len(chunk) + 1) * len(rollouts[i].ids) > self.max_tokens:
                yield chunk
                chunk = []
            chunk.append(i)
        if chunk:
            yield chunk

    @torch.no_grad()
    def _score(self, rollouts: Sequence[Rollout]) -> tuple[list, list | None, list | None, list]:
        """Old log-probabilities (and reference ones, and hidden states for values) of every rollout, and
        the untempered ones the sampler stores (as vLLM does by default), for the agreement check."""
        old, ref, hid = [None] * len(rollouts), [None] * len(rollouts), [None] * len(rollouts)
        untempered = [None] * len(rollouts)
        self.model.eval()
        for chunk in self._chunks(range(len(rollouts)), rollouts):
            rows = [rollouts[i] for i in chunk]
            logp, _, h, _ = self._forward(self.model, rows, hidden=self.value is not None)
            raw = logp if self.temperature == 1 else self._forward(self.model, rows, temperature=1.0)[0]
            ref_logp = None
            if self.sw.kl_coef > 0:
                with self._reference() as reference:
                    ref_logp = self._forward(reference, rows)[0]
            for j, i in enumerate(chunk):
                n = len(rollouts[i].ids)
                old[i], untempered[i] = logp[j, :n], raw[j, :n]
                ref[i] = ref_logp[j, :n] if ref_logp is not None else None
                hid[i] = h[j, :n] if h is not None else None
        ref = ref if self.sw.kl_coef > 0 else None
        return old, ref, (hid if self.value is not None else None), untempered

    @contextmanager
    def _reference(self) -> Iterator[nn.Module]:
        """The frozen reference: the copy, or (LoRA) the model itself with its adapters off."""
        if self.reference is not None:
            yield self.reference
        else:
            with self.model.disable_adapter():
                yield self.model

    # ---- advantages -------------------------------------------------------------------------------
    def prepare(self, rollouts: Sequence[Rollout]) -> Prepared:
        """Score the rollouts, estimate advantages, and drop those below `min_abs_advantage`."""
        old, ref, hidden, untempered = self._score(rollouts)
        rewards = torch.tensor([r.reward for r in rollouts], dtype=torch.float64)
        groups = torch.tensor([r.group for r in rollouts])
        masks = [torch.tensor([float(t > 0) for t in r.turns]) for r in rollouts]
        stats = {"logprob_gap": _logprob_gap(rollouts, untempered)}
        returns = None
        if self.sw.advantage == "gae":
            if not self.value_warm:
                stats["value_loss_warmup"] = self._warm_values(rollouts, hidden, masks)
                self.value_warm = True
            advantages, returns = [], []
            with torch.no_grad():
                for r, h, m in zip(rollouts, hidden, masks, strict=True):
                    reply = m.bool()
                    values = self.value(h[reply]).clamp(0, 1).double()
                    adv, ret = gae(r.reward, values, self.sw.gamma, self.sw.lam)
                    advantages.append(_scatter(adv.float(), reply))
                    returns.append(_scatter(ret.float(), reply))
        else:
            if self.sw.advantage == "loo":
                per_episode = leave_one_out(rewards, groups)
            elif self.sw.advantage == "group_norm":
                per_episode = group_normalized(rewards, groups)
            else:
                per_episode = reinforce_pp(rewards, torch.tensor([int(m.sum()) for m in masks]))
            advantages = [float(a) * m for a, m in zip(per_episode, masks, strict=True)]
        keep = list(range(len(rollouts)))
        if self.sw.min_abs_advantage > 0 and self.sw.advantage != "gae":
            keep = [i for i in keep if abs(float(per_episode[i])) >= self.sw.min_abs_advantage]
        stats["filtered"] = 1 - len(keep) / len(rollouts)

        def pick(xs):
            return None if xs is None else [xs[i] for i in keep]

        return Prepared(
            [rollouts[i] for i in keep], pick(old), pick(advantages), pick(returns), pick(ref), stats
        )

    def _warm_values(self, rollouts, hidden, masks) -> float:
        """`value_warmup` value-only passes over the first iteration (LOOP C.5 pre-trains its critic)."""
        targets = [torch.full_like(m, r.reward) for r, m in zip(rollouts, masks, strict=True)]
        loss = float("nan")
        for _ in range(self.sw.value_warmup):
            for part in self._minibatches(len(rollouts)):
                loss = self._value_step(
                    [hidden[i] for i in part], [targets[i] for i in part], [masks[i] for i in part]
                )
        return loss

    def _value_step(self, hidden, targets, masks) -> float:
        self.value_optimizer.zero_grad()
        pred = [_scatter(self.value(h[m.bool()]), m.bool()) for h, m in zip(hidden, masks, strict=True)]
        num = sum(((p - t) ** 2 * m).sum() for p, t, m in zip(pred, targets, masks, strict=True))
        loss = num / sum(m.sum() for m in masks)
        loss.backward()
        self.value_optimizer.step()
        return float(loss.detach())

    # ---- the update -------------------------------------------------------------------------------
    def _minibatches(self, n: int) -> list[list[int]]:
        order = torch.randperm(n, generator=self.generator).tolist()
        size = -(-n // self.sw.minibatches)
        return [order[i : i + size] for i in range(0, n, size)]

    def backward(
        self, batch: Prepared, part: Sequence[int], units: Sequence[torch.Tensor]
    ) -> dict[str, float]:
        """Accumulate into the parameters' gradients the loss of the episodes `part` (their mean), in forward
        passes of at most `max_tokens`; the part's sums of KL to the sampler, entropy and reply tokens."""
        sums = dict.fromkeys(
            ("kl", "entropy", "reply_tokens", "clipped", "units", "tokens", "kl_ref", "value_loss"), 0.0
        )
        for chunk in self._chunks(part, batch.rollouts):
            rows = [batch.rollouts[i] for i in chunk]
            logp, entropy, h, mask = self._forward(self.model, rows, hidden=self.value is not None)
            old = _pad([batch.old_logp[i] for i in chunk], logp.shape[1])
            adv = _pad([batch.advantages[i] for i in chunk], logp.shape[1])
            unit = _pad([units[i] for i in chunk], logp.shape[1]).long()
            reply = (unit > 0).float()
            parts = clipped_objective(logp, old, adv, unit, self.sw.clip)
            loss = parts.loss
            if self.sw.kl_coef > 0:
                ref = _pad([batch.ref_logp[i] for i in chunk], logp.shape[1])
                kl_ref = kl_penalty(logp, ref, reply)
                loss = loss + self.sw.kl_coef * kl_ref
                sums["kl_ref"] += float(kl_ref.detach()) * len(chunk) / len(part)
            (loss * len(chunk) / len(part)).backward()
            if self.value is not None:
                ret = _pad([batch.returns[i] for i in chunk], logp.shape[1])
                pred = self.value(h)
                value_loss = (((pred - ret) ** 2) * reply).sum() / reply.sum()
                (value_loss * len(chunk) / len(part)).backward()
                sums["value_loss"] += float(value_loss.detach()) * len(chunk) / len(part)
            with torch.no_grad():
                log_ratio = (logp - old) * reply
                sums["kl"] += float(((log_ratio.exp() - 1) - log_ratio).sum())
                sums["entropy"] += float((entropy * reply).sum())
                sums["reply_tokens"] += float(reply.sum())
            sums["clipped"] += float(parts.clipped)
            sums["units"] += float(parts.units)
            sums["tokens"] += int(mask.sum())
        return sums

    def step(self, batch: Prepared) -> dict[str, float]:
        """`epochs` x `minibatches` clipped gradient steps on a prepared batch; the step's statistics."""
        sums = dict.fromkeys(
            ("clipped", "units", "kl", "entropy", "grad_norm", "steps", "kl_ref", "value_loss"), 0.0
        )
        tokens, aborted = 0, False
        start = time.perf_counter()
        self.model.train()
        units = self.units(batch)
        for _ in range(self.sw.epochs):
            for part in self._minibatches(len(batch.rollouts)) if batch.rollouts else []:
                self.optimizer.zero_grad()
                if self.value is not None:
                    self.value_optimizer.zero_grad()
                got = self.backward(batch, part, units)
                sums["clipped"] += got["clipped"]
                sums["units"] += got["units"]
                sums["kl_ref"] += got["kl_ref"]
                sums["value_loss"] += got["value_loss"]
                tokens += int(got["tokens"])
                kl = got["kl"] / max(got["reply_tokens"], 1)
                if self.sw.kl_abort is not None and kl > self.sw.kl_abort:
                    aborted = True
                    break
                norm = torch.nn.utils.clip_grad_norm_(self.params, self.sw.max_grad_norm or float("inf"))
                self.optimizer.step()
                self.scheduler.step()
                if self.value is not None:
                    self.value_optimizer.step()
                sums["kl"] += kl
                sums["entropy"] += got["entropy"] / max(got["reply_tokens"], 1)
                sums["grad_norm"] += float(norm)
                sums["steps"] += 1
            if aborted:
                break
        steps = max(sums["steps"], 1)
        wall = time.perf_counter() - start
        out = {
            "steps": int(sums["steps"]),
            "clip_fraction": sums["clipped"] / max(sums["units"], 1),
            "kl": sums["kl"] / steps,
            "entropy": sums["entropy"] / steps,
            "grad_norm": sums["grad_norm"] / steps,
            "aborted": aborted,
            "train_tokens_per_s": tokens / wall if wall > 0 else 0.0,
        }
        if self.sw.kl_coef > 0:
            out["kl_ref"] = sums["kl_ref"] / steps
        if self.value is not None:
            out["value_loss"] = sums["value_loss"] / steps
        return out

    def units(self, batch: Prepared) -> list[torch.Tensor]:
        """Each kept episode's importance-weight unit per id, at the switches' level."""
        return [torch.tensor(unit_ids(r.turns, self.sw.level)) for r in batch.rollouts]


def _pad(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width, dtype=rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _scatter(values: torch.Tensor, reply: torch.Tensor) -> torch.Tensor:
    """Per-reply-id values placed at the reply positions of a sequence (0 elsewhere); differentiable."""
    return torch.zeros(len(reply), dtype=values.dtype).index_put((reply.nonzero().squeeze(-1),), values)


def _logprob_gap(rollouts: Sequence[Rollout], old: Sequence[torch.Tensor]) -> float:
    """Mean |sampler log-prob - learner log-prob| over reply ids (0 when both computed the same numbers)."""
    gaps = []
    for r, lp in zip(rollouts, old, strict=True):
        if r.sampled_logp:
            learner = lp[torch.tensor(r.turns) > 0]
            gaps.append((learner - torch.tensor(r.sampled_logp)).abs())
    return float(torch.cat(gaps).mean()) if gaps else 0.0
