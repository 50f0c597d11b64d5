"""A generation backend for OpenAI-compatible completion servers: vLLM (the GPU path) or `gymflow serve-model`.

    vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000        # or: gymflow serve-model data/models/sft --port 8000
    client = CompletionClient("http://127.0.0.1:8000/v1")
    episodes = rollout(client, fmt, jobs, cfg)              # instead of an in-process model

Prompts go out as token ids and replies come back as token ids (vLLM's `return_tokens_as_token_ids` writes
each sampled token as "token_id:<id>"), so nothing is decoded and re-encoded between sampling and training.
The log-probabilities are the server's: vLLM's default (`--logprobs-mode raw_logprobs`) is the log-softmax
of the raw logits, the quantity our sampler records and the learner recomputes.
"""

from __future__ import annotations

from collections.abc import Sequence

from openai import APIConnectionError, OpenAI
from openai.types import CompletionChoice

from gymflow.errors import UserError
from gymflow.models.sampling import Completion

# Sent with every request: vLLM fills sampling parameters a request leaves out from the model's
# generation_config.json (Qwen2.5's has top_k 20 and repetition_penalty 1.05), which would sample from a
# distribution other than the policy whose log-probabilities are recorded. Other servers ignore them.
PLAIN_SAMPLING = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}


class CompletionClient:
    """Continues token-id prompts on a /v1/completions server (implements `CompletionBackend`)."""

    def __init__(
        self, base_url: str, model: str | None = None, api_key: str = "EMPTY", timeout: float = 600.0
    ) -> None:
        """`model` defaults to the server's first (vLLM and `gymflow serve-model` serve one)."""
        self.client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout)
        try:
            self.model = model or self.client.models.list().data[0].id
        except APIConnectionError:
            raise UserError(
                f"no completion server answers at {base_url}: start one (`vllm serve MODEL` or "
                "`gymflow serve-model PATH`) or fix the URL (rollout.servers)"
            ) from None

    def complete(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> list[Completion]:
        """One batched request; each reply's exact ids, their log-probabilities, and "stop" or "length".

        A stop id is kept as the reply's last token, as the in-process sampler keeps it. vLLM applies
        `seed` to each prompt, so identical prompts with a seed get identical replies.
        """
        if not prompts:
            return []
        response = self.client.completions.create(
            model=self.model,
            prompt=[list(p) for p in prompts],
            max_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            logprobs=1,  # vLLM: the sampled token's log-probability (plus the top 1); some servers read 0 as none
            extra_body={
                **PLAIN_SAMPLING,
                "stop_token_ids": list(stop_ids),
                "return_tokens_as_token_ids": True,
            },
            **({} if seed is None else {"seed": seed}),
        )
        choices = sorted(response.choices, key=lambda c: c.index)
        if len(choices) != len(prompts):
            raise RuntimeError(f"asked {self.model} for {len(prompts)} completions, got {len(choices)}")
        return [parse_choice(c) for c in choices]


def parse_choice(choice: CompletionChoice) -> Completion:
    """The sampled ids and log-probabilities of a choice whose logprobs carry "token_id:<id>" tokens."""
    lp = choice.logprobs
    if lp is None or lp.tokens is None or lp.token_logprobs is None:
        raise RuntimeError("the server returned no logprobs; it must honour `logprobs` (vLLM does)")
    try:
        ids = [int(t.removeprefix("token_id:")) for t in lp.tokens if t.startswith("token_id:")]
    except ValueError:
        ids = []
    if len(ids) != len(lp.tokens):
        raise RuntimeError(
            "the server returned token text, not ids; it must support `return_tokens_as_token_ids` (vLLM does)"
        )
    if choice.finish_reason not in ("stop", "length"):  # e.g. vLLM's "abort": the reply is not whole
        raise RuntimeError(f"the server ended a completion with {choice.finish_reason!r}")
    return Completion(ids, [float(x) for x in lp.token_logprobs], choice.finish_reason)
