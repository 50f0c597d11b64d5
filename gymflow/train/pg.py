"""The policy-gradient learner: one trainer whose switches (`gymflow.train.presets.PGSwitches`) make LOOP, RLOO, GRPO,
REINFORCE++ and PPO with a value head.

It sees episodes as token sequences exactly as they were sampled (`TokenEpisode`): context ids carry no loss,
each reply's ids carry the loss. An update (`PolicyGradient.step`) is LOOP Algorithm 1, lines 5-9:
1. the learner recomputes the log-probabilities of the sampled tokens under the weights that sampled them
   (the PPO denominator; LOOP App. D), and under the frozen reference if there is a KL term;
2. advantages from the rewards of each task's group (`EPISODE_ADVANTAGES`, or a value head and GAE), and
   episodes with |A| < `min_abs_advantage` are dropped;
3. `epochs` passes of `minibatches` clipped gradient steps over the shuffled episodes, each step's
   episodes split into forward passes of at most `max_tokens`.

    learner = PolicyGradient(model, LearnerConfig(switches=switches(rl), lr=rl.lr, pad_id=tokenizer.pad_token_id))
    learner.step(learner.prepare(token_episodes(episodes, fmt)))   # gymflow.train.rl

Data-parallel when torch.distributed is initialised (`gymflow.train.rl` under `accelerate launch`): every process
holds the same episodes and weights; each optimizer step's forward passes (`prefix_chunks`, as one process cuts
them) are dealt out over the processes, and the gradients and statistics summed (`all_reduce_gradients`). Each
pass's loss is already weighted by the whole mini-batch (its episodes / the mini-batch's), so the sum is one
process's gradient; the steps, clipping and KL abort follow from it alike everywhere.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from transformers import PreTrainedModel

from gymflow.train.advantages import EPISODE_ADVANTAGES, gae
from gymflow.train.logprobs import chosen_logprobs
from gymflow.train.pg_loss import clipped_objective, kl_penalty, unit_ids
from gymflow.train.prefix import prefix_chunks, reply_states
from gymflow.train.presets import PGSwitches


@dataclass
class TokenEpisode:
    """One episode as the learner sees it: the token ids sampled, and which reply each id belongs to."""

    ids: list[int]  # the whole sequence the sampler fed and produced
    turns: list[int]  # per id: the reply it was sampled in (1, 2, ...), 0 for context
    reward: float
    group: int  # episodes of the same task in the same iteration share a group
    sampled_logp: list[float] = field(default_factory=list)  # the sampler's, per reply id (diagnostics only)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.turns) or not any(self.turns) or self.turns[0]:
            raise ValueError(
                "a token episode needs one reply number per id, some reply ids, and context first"
            )


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


class ValueBaseline:
    """The value head as an advantage source (`advantage: gae`, PPO's): per-id advantages and value targets by
    GAE from its predictions on the policy's last hidden states, `value_warmup` value-only passes over the first
    iteration (LOOP C.5 pre-trains its critic), and its squared error beside the policy's loss. Its parameters
    are a group of the learner's optimizer, at their own rate; hidden states come detached, so the two losses
    train disjoint weights."""

    def __init__(self, hidden_size: int, switches: PGSwitches, device: torch.device, seed: int) -> None:
        # its own draw of initial weights: a resumed run builds the same head as a straight one
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.head = ValueHead(hidden_size).to(device)
        self.sw, self.device = switches, device
        self.warm = switches.value_warmup == 0

    def param_group(self) -> dict:
        """The head's optimizer group: `value_lr`, AdamW's default decay, no learning-rate warm-up."""
        return {"params": list(self.head.parameters()), "lr": self.sw.value_lr, "weight_decay": 0.01}

    def advantages(
        self,
        episodes: Sequence[TokenEpisode],
        hidden: Sequence[torch.Tensor],
        masks: Sequence[torch.Tensor],
        optimizer: torch.optim.Optimizer,
        minibatches: Callable[[int], list[list[int]]],
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], dict[str, float]]:
        """Per-id advantages and value targets (0 at context), the predictions clipped to the reward range
        [0, 1] (LOOP C.5); warmed up first if this is the first iteration."""
        stats = {}
        if not self.warm:
            stats["value_loss_warmup"] = self._warm_up(episodes, hidden, masks, optimizer, minibatches)
            self.warm = True
        advantages, returns = [], []
        with torch.no_grad():
            for e, h, m in zip(episodes, hidden, masks, strict=True):
                reply = m.bool()
                values = self._values(h[reply]).clamp(0, 1).double()
                adv, ret = gae(e.reward, values, self.sw.gamma, self.sw.lam)
                advantages.append(_scatter(adv.float(), reply))
                returns.append(_scatter(ret.float(), reply))
        return advantages, returns, stats

    def loss(self, hidden: torch.Tensor, returns: torch.Tensor, reply: torch.Tensor) -> torch.Tensor:
        """Mean squared error of the predictions against the value targets over reply ids ([B, T] each)."""
        return (((self.head(hidden) - returns) ** 2) * reply).sum() / reply.sum()

    def _warm_up(self, episodes, hidden, masks, optimizer, minibatches) -> float:
        """Value-only steps (the policy has no gradient, so AdamW leaves it and its moments alone) toward each
        episode's reward."""
        targets = [torch.full_like(m, e.reward) for e, m in zip(episodes, masks, strict=True)]
        loss = float("nan")
        for _ in range(self.sw.value_warmup):
            for part in minibatches(len(episodes)):
                optimizer.zero_grad()
                pred = [_scatter(self._values(hidden[i][masks[i].bool()]), masks[i].bool()) for i in part]
                num = sum(((p - targets[i]) ** 2 * masks[i]).sum() for p, i in zip(pred, part, strict=True))
                step_loss = num / sum(masks[i].sum() for i in part)
                step_loss.backward()
                optimizer.step()
                loss = float(step_loss.detach())
        return loss

    def _values(self, hidden: torch.Tensor) -> torch.Tensor:
        """The head on hidden states kept on the CPU (`_score`), its predictions back there."""
        return self.head(hidden.to(self.device)).to(hidden.device)


@dataclass(kw_only=True, frozen=True)
class LearnerConfig:
    """Everything `PolicyGradient` needs besides the model (`rl`'s section gives each; typical values there)."""

    switches: PGSwitches
    """the algorithm: `rl.algorithm`'s preset with `rl.switches` over it (`gymflow.train.presets.switches`)"""
    lr: float
    """AdamW's learning rate (weight decay 0)"""
    temperature: float = 1.0
    """the sampler's: log-probabilities are recomputed at the temperature the tokens were drawn with"""
    max_tokens: int = 16384
    """padded ids per forward pass, a prefix a group's rows share counted once (`prefix.prefix_chunks`): caps the
    activations' memory, not the gradient (passes accumulate)"""
    pad_id: int = 0
    """the tokenizer's padding id, to fill rows of unequal length"""
    seed: int = 0
    """seeds the mini-batch shuffle and a value head's initial weights"""
    warmup: int = 0
    """optimizer steps of linear learning-rate warm-up (0: none)"""

    def __post_init__(self) -> None:
        if self.lr < 0 or self.temperature <= 0 or self.max_tokens < 1 or self.warmup < 0:
            raise ValueError(
                f"LearnerConfig(lr={self.lr}, temperature={self.temperature}, max_tokens={self.max_tokens}, "
                f"warmup={self.warmup}): needs lr >= 0, temperature > 0, max_tokens >= 1 and warmup >= 0"
            )


@dataclass
class Prepared:
    """An iteration's episodes with everything the update needs, one tensor per kept episode."""

    episodes: list[TokenEpisode]
    old_logp: list[torch.Tensor]  # per id (0 at context), under the sampling weights
    advantages: list[torch.Tensor]  # per id (0 at context)
    returns: list[torch.Tensor] | None  # value targets per id (gae)
    ref_logp: list[torch.Tensor] | None
    stats: dict[str, float]


class PolicyGradient:
    def __init__(self, model: PreTrainedModel, config: LearnerConfig) -> None:
        self.model, self.config, self.sw = model, config, config.switches
        self.rank, self.processes = process_group()
        self.device = next(model.parameters()).device
        warmup = config.warmup
        self.params = [p for p in model.parameters() if p.requires_grad]  # the policy's, clipped together
        self.value = None
        groups = [{"params": self.params}]
        if self.sw.advantage == "gae":
            self.value = ValueBaseline(model.config.hidden_size, self.sw, self.device, config.seed)
            groups.append(self.value.param_group())
        self.trained = [p for group in groups for p in group["params"]]
        if self.processes > 1:  # the first process's weights everywhere (LoRA adapters, a value head: random)
            _broadcast(self.trained)
        self.optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=0.0)
        # Linear warm-up of the policy's rate over the first `warmup` steps: Adam's first steps move every weight
        # by about lr, whatever its gradient's size, and that is where the KL to the sampler jumped.
        policy_rate = lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0  # noqa: E731
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, [policy_rate] + [lambda step: 1.0] * (len(groups) - 1)
        )
        self.reference = None
        if self.sw.kl_coef > 0 and not hasattr(model, "disable_adapter"):  # LoRA: the base is the reference
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.generator = torch.Generator().manual_seed(config.seed)

    # ---- forward passes ---------------------------------------------------------------------------
    def _forward(
        self,
        model: nn.Module,
        rows: Sequence[TokenEpisode],
        hidden: bool = False,
        temperature: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Per position [B, T], 0 except at reply ids: the log-probability of the id given the ids before it,
        and the entropy of the distribution it was drawn from; the last hidden state it was predicted from
        ([B, T, H], for values); and the mask of real ids. The LM head and softmax run at reply positions
        only: most of a multi-turn sequence is context, and the full-vocabulary softmax is costly on CPU. A
        prefix the rows of a group share runs once (`gymflow.train.prefix`)."""
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        ids, mask, where, before = reply_states(causal_lm.model, rows, self.config.pad_id, self.device)
        temperature = temperature or self.config.temperature
        logp, logp_all = chosen_logprobs(causal_lm.lm_head, before, ids[where], temperature)
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        shape = ids.shape
        h = None
        if hidden:
            h = torch.zeros(*shape, before.shape[-1], device=self.device)
            h = h.index_put(where, before.detach().float())
        return (
            torch.zeros(shape, device=self.device).index_put(where, logp),
            torch.zeros(shape, device=self.device).index_put(where, entropy),
            h,
            mask,
        )

    @torch.no_grad()
    def _score(self, episodes: Sequence[TokenEpisode]) -> tuple[list, list | None, list | None, list]:
        """Old log-probabilities (and reference ones, and hidden states for values) of every episode, and
        the untempered ones the sampler stores (as vLLM does by default), for the agreement check."""
        old, ref, hid = [None] * len(episodes), [None] * len(episodes), [None] * len(episodes)
        untempered = [None] * len(episodes)
        self.model.eval()
        for chunk in prefix_chunks(range(len(episodes)), episodes, self.config.max_tokens):
            rows = [episodes[i] for i in chunk]
            logp, _, h, _ = self._forward(self.model, rows, hidden=self.value is not None)
            raw = logp
            if self.config.temperature != 1:
                raw = self._forward(self.model, rows, temperature=1.0)[0]
            ref_logp = None
            if self.sw.kl_coef > 0:
                with self._reference() as reference:
                    ref_logp = self._forward(reference, rows)[0]
            for j, i in enumerate(chunk):  # kept on the CPU, where advantages are computed
                n = len(episodes[i].ids)
                old[i], untempered[i] = logp[j, :n].cpu(), raw[j, :n].cpu()
                ref[i] = ref_logp[j, :n].cpu() if ref_logp is not None else None
                hid[i] = h[j, :n].cpu() if h is not None else None
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
    def prepare(self, episodes: Sequence[TokenEpisode]) -> Prepared:
        """Score the episodes, estimate advantages, and drop those below `min_abs_advantage`."""
        old, ref, hidden, untempered = self._score(episodes)
        masks = [torch.tensor([float(t > 0) for t in e.turns]) for e in episodes]
        stats = {"logprob_gap": _logprob_gap(episodes, untempered)}
        keep, returns = list(range(len(episodes))), None
        if self.value is not None:
            advantages, returns, more = self.value.advantages(
                episodes, hidden, masks, self.optimizer, self._minibatches
            )
            stats |= more
        else:
            rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float64)
            groups = torch.tensor([e.group for e in episodes])
            tokens = torch.tensor([int(m.sum()) for m in masks])
            per_episode = EPISODE_ADVANTAGES[self.sw.advantage](rewards, groups, tokens)
            advantages = [float(a) * m for a, m in zip(per_episode, masks, strict=True)]
            if self.sw.min_abs_advantage > 0:
                keep = [i for i in keep if abs(float(per_episode[i])) >= self.sw.min_abs_advantage]
        stats["filtered"] = 1 - len(keep) / len(episodes)

        def pick(xs):
            return None if xs is None else [xs[i] for i in keep]

        return Prepared(
            episodes=pick(episodes),
            old_logp=pick(old),
            advantages=pick(advantages),
            returns=pick(returns),
            ref_logp=pick(ref),
            stats=stats,
        )

    # ---- the update -------------------------------------------------------------------------------
    def _minibatches(self, n: int) -> list[list[int]]:
        order = torch.randperm(n, generator=self.generator).tolist()
        size = -(-n // self.sw.minibatches)
        return [order[i : i + size] for i in range(0, n, size)]

    def backward(
        self, batch: Prepared, part: Sequence[int], units: Sequence[torch.Tensor]
    ) -> dict[str, float]:
        """Accumulate into the parameters' gradients the loss of the episodes `part` (their mean), in forward
        passes of at most `max_tokens`; the part's sums of KL to the sampler, entropy and reply tokens. Under
        several processes, this process's passes only (every `processes`-th): `step` sums over processes."""
        sums = dict.fromkeys(
            ("kl", "entropy", "reply_tokens", "clipped", "units", "tokens", "kl_ref", "value_loss"), 0.0
        )
        chunks = prefix_chunks(part, batch.episodes, self.config.max_tokens)
        for chunk in chunks[self.rank :: self.processes]:
            rows = [batch.episodes[i] for i in chunk]
            logp, entropy, h, mask = self._forward(self.model, rows, hidden=self.value is not None)
            width, device = logp.shape[1], self.device
            old = _pad([batch.old_logp[i] for i in chunk], width, device)
            adv = _pad([batch.advantages[i] for i in chunk], width, device)
            unit = _pad([units[i] for i in chunk], width, device).long()
            reply = (unit > 0).float()
            parts = clipped_objective(logp, old, adv, unit, self.sw.clip)
            loss = parts.loss
            if self.sw.kl_coef > 0:
                ref = _pad([batch.ref_logp[i] for i in chunk], width, device)
                kl_ref = kl_penalty(logp, ref, reply)
                loss = loss + self.sw.kl_coef * kl_ref
                sums["kl_ref"] += float(kl_ref.detach()) * len(chunk) / len(part)
            if self.value is not None:
                value_loss = self.value.loss(h, _pad([batch.returns[i] for i in chunk], width, device), reply)
                loss = loss + value_loss  # the head's own weights: the policy's gradient is unchanged
                sums["value_loss"] += float(value_loss.detach()) * len(chunk) / len(part)
            (loss * len(chunk) / len(part)).backward()
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
            for part in self._minibatches(len(batch.episodes)) if batch.episodes else []:
                self.optimizer.zero_grad()
                got = self.backward(batch, part, units)
                if self.processes > 1:
                    got = self._all_reduce(got)
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

    def _all_reduce(self, sums: dict[str, float]) -> dict[str, float]:
        """Every process's gradients and statistics of a mini-batch summed: one process's."""
        all_reduce_gradients(self.trained)
        totals = torch.tensor(list(sums.values()), dtype=torch.float64, device=self.device)
        dist.all_reduce(totals)
        return dict(zip(sums, totals.tolist(), strict=True))

    def units(self, batch: Prepared) -> list[torch.Tensor]:
        """Each kept episode's importance-weight unit per id, at the switches' level."""
        return [torch.tensor(unit_ids(e.turns, self.sw.level)) for e in batch.episodes]


def process_group() -> tuple[int, int]:
    """This process's rank and the number of processes: (0, 1) unless torch.distributed is initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_gradients(params: Sequence[torch.Tensor]) -> None:
    """Sum each parameter's gradient over the processes, one flat all-reduce per dtype. A parameter no process
    has a gradient for keeps none (AdamW skips it, as in one process); one only some have counts zero elsewhere."""
    device = params[0].device
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=device)
    dist.all_reduce(has)
    live = [p for p, n in zip(params, has.tolist(), strict=True) if n]
    for p in live:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    for dtype in dict.fromkeys(p.grad.dtype for p in live):  # the same order in every process
        grads = [p.grad for p in live if p.grad.dtype == dtype]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        for g, total in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            g.copy_(total.view_as(g))


def _broadcast(params: Sequence[torch.Tensor]) -> None:
    """The first process's values of `params` in every process."""
    with torch.no_grad():
        for p in params:
            dist.broadcast(p.data, src=0)


def _pad(rows: Sequence[torch.Tensor], width: int, device: torch.device | None = None) -> torch.Tensor:
    out = torch.zeros(len(rows), width, dtype=rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out.to(device) if device is not None else out


def _scatter(values: torch.Tensor, reply: torch.Tensor) -> torch.Tensor:
    """Per-reply-id values placed at the reply positions of a sequence (0 elsewhere); differentiable."""
    return torch.zeros(len(reply), dtype=values.dtype).index_put((reply.nonzero().squeeze(-1),), values)


def _logprob_gap(episodes: Sequence[TokenEpisode], old: Sequence[torch.Tensor]) -> float:
    """Mean |sampler log-prob - learner log-prob| over reply ids (0 when both computed the same numbers)."""
    gaps = []
    for e, lp in zip(episodes, old, strict=True):
        if e.sampled_logp:
            learner = lp[torch.tensor(e.turns) > 0]
            gaps.append((learner - torch.tensor(e.sampled_logp)).abs())
    return float(torch.cat(gaps).mean()) if gaps else 0.0
