"""In-process batched sampling with the policy's log-probability of every sampled token.

A hand-written loop over Hugging Face's KV cache rather than `model.generate`, because rollouts need, per
sequence, exactly the ids sampled, the policy's log-probability of each (log-softmax of the raw logits, the
quantity the learner recomputes; temperature and top-p only shape the draw), and why it stopped.
Prompts are left-padded so all sequences append on the right; position ids skip the padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel


@dataclass
class Completion:
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"  # "stop": ended with a stop token (kept, it is sampled and trained on)


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask (to -inf) every token outside the smallest set whose probability reaches `top_p`."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative - sorted_logits.softmax(dim=-1) >= top_p  # mass before this token already reaches top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt) :] = torch.tensor(prompt)
            mask[row, width - len(prompt) :] = 1
    return ids, mask


@torch.no_grad()
def sample(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stop_ids: Sequence[int],
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> list[Completion]:
    """Continue every prompt until a stop token or `max_new_tokens`; temperature 0 is greedy."""
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    ids, mask = left_pad(prompts, pad_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache).logits[
        :, -1
    ]
    stops = torch.tensor(list(stop_ids), dtype=torch.long)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    out = [Completion() for _ in prompts]
    next_position = positions[:, -1] + 1
    for _ in range(max_new_tokens):
        logits = logits.float()
        logp = logits.log_softmax(-1)
        if temperature == 0:
            token = logits.argmax(-1)
        else:
            probs = top_p_filter(logits / temperature, top_p).softmax(-1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        chosen = logp.gather(-1, token[:, None]).squeeze(-1)
        for row in (~done).nonzero().flatten().tolist():
            out[row].token_ids.append(int(token[row]))
            out[row].logprobs.append(float(chosen[row]))
        stopped = torch.isin(token, stops) & ~done
        for row in stopped.nonzero().flatten().tolist():
            out[row].finish_reason = "stop"
        done |= stopped
        if done.all():
            break
        token = token.masked_fill(done, pad_id)  # finished rows keep stepping, masked out, until all finish
        mask = torch.cat([mask, (~done).long()[:, None]], dim=-1)
        logits = model(
            input_ids=token[:, None],
            attention_mask=mask,
            position_ids=next_position[:, None],
            past_key_values=cache,
        ).logits[:, -1]
        next_position = next_position + 1
    return out
