"""Log-probabilities of the ids a policy produced, from hidden states: the one computation every trainer shares
(the policy gradient's ratios and entropies, the critic's Eq. 3 advantages, DPO's sequence log-likelihoods)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from transformers import PreTrainedModel


def chosen_logprobs(
    lm_head: nn.Module, states: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(target | state) per row of `states` [N, H] (the hidden state each target id was predicted from)
    and `targets` [N], at `temperature`; and the whole log-softmax [N, V], for an entropy. The LM head and the
    softmax run on these N states only: most of a multi-turn sequence is context, and a full-vocabulary softmax
    is costly on CPU."""
    every = (lm_head(states).float() / temperature).log_softmax(-1)
    return every.gather(-1, targets[:, None]).squeeze(-1), every


def token_logprobs(
    model: PreTrainedModel, ids: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row and position [B, T] (rows right-padded to the longest): log pi(id | the ids before it) where
    the mask is 1, else 0; and the mask as floats."""
    width = max(len(row) for row in ids)
    batch = torch.full((len(ids), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(ids), width), dtype=torch.long)
    counted = torch.zeros((len(ids), width), dtype=torch.bool)
    for i, (row, mask) in enumerate(zip(ids, masks, strict=True)):
        batch[i, : len(row)] = torch.tensor(row)
        attention[i, : len(row)] = 1
        counted[i, : len(row)] = torch.tensor(mask, dtype=torch.bool)
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA: adapters inside
    states = causal_lm.model(input_ids=batch, attention_mask=attention).last_hidden_state
    where = counted.nonzero(as_tuple=True)
    logp, _ = chosen_logprobs(causal_lm.lm_head, states[where[0], where[1] - 1], batch[where])
    return torch.zeros(batch.shape).index_put(where, logp), counted.float()
