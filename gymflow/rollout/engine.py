"""The multi-turn rollout engine: many episodes at once, one batched generation per turn.

In process, each batch of episodes shares one KV cache (`Decoder`): a turn appends, per episode, the ids
since its last reply (its observation through the chat template) and samples the next reply for every
episode still running, so history is never re-encoded; episodes that end leave the cache, and so does the
padding between turns (`Decoder.keep`). Through a server (`CompletionBackend`, e.g. vLLM
behind `gymflow.models.openai_client`), a turn sends every running episode's whole id sequence in one
batched request; the server's own prefix cache is what saves re-encoding there. Either way every assistant
message keeps the ids and log-probabilities exactly as sampled; `episode_ids_and_mask` rebuilds the whole
sequence and its loss mask from them.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import torch
from transformers import PreTrainedModel

from gymflow.agent.chat import ChatFormat
from gymflow.agent.react import parse_action
from gymflow.config import RolloutParams
from gymflow.envs import make_env
from gymflow.envs.base import Env, Step, Task, out_of_turns, turn_limit
from gymflow.models.sampling import Completion, CompletionBackend, Decoder
from gymflow.progress import bar as progress_bar
from gymflow.remote.env_client import EnvUnavailable
from gymflow.rollout.records import Episode, Message


@dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    """How episodes are sampled. A stage builds it with `from_rollout`, from params.yaml's `rollout:` section and
    its own temperature; tests and benchmarks name the fields they set."""

    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    max_new_tokens: int = 96  # per reply; must exceed the longest thought, or replies are cut off
    max_length: int = 4096  # tokens per episode; an episode that would pass it ends ("length_limit")
    batch_size: int = 32  # episodes sharing one cache

    @classmethod
    def from_rollout(
        cls, rollout: RolloutParams, *, temperature: float, top_p: float = 1.0
    ) -> SamplingConfig:
        """`rollout`'s reply and episode lengths and batch size, at the caller's `temperature` (0: greedy) and
        `top_p`: the one place a stage's sampling is built."""
        return cls(
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=rollout.max_new_tokens,
            max_length=rollout.max_length,
            batch_size=rollout.batch_size,
        )


@dataclass(frozen=True)
class EarlyStop:
    """Stop collecting once `fraction` of all episodes and at least `min_per_task` of every task's have
    finished; the stragglers still running are cancelled (LOOP App. D)."""

    fraction: float = 0.9
    min_per_task: int = 4

    def reached(self, jobs: Sequence[tuple[Task, int]], finished: Sequence[Episode]) -> bool:
        if len(finished) < self.fraction * len(jobs):
            return False
        done = Counter((ep.task.env, ep.task.task_id) for ep in finished)
        wanted = Counter((t.env, t.task_id) for t, _ in jobs)
        return all(done[key] >= min(self.min_per_task, n) for key, n in wanted.items())


class _Running:
    """One episode in flight."""

    def __init__(
        self, env: Env, task: Task, sample: int, horizon: int, fmt: ChatFormat, reset: str | EnvUnavailable
    ) -> None:
        """`reset`: what `env.reset(task)` returned, or the `EnvUnavailable` it raised (`_reset`)."""
        self.env, self.task, self.sample, self.horizon = env, task, sample, horizon
        # its environment's server could not start it: it ends at once as an error
        self.failed = isinstance(reset, EnvUnavailable)
        observation = f"(environment unavailable: {reset})" if self.failed else reset
        self.messages = [Message("system", env.spec.system_prompt), Message("user", observation)]
        self.ids = fmt.prompt(env.spec.system_prompt, observation)  # the sequence the next reply continues
        self.cached = 0  # how many of `ids` the shared KV cache holds (in-process path)

    def finish(self, reason: str) -> Episode:
        reward = self.env.reward
        return Episode(
            task=self.task,
            messages=self.messages,
            reward=reward,
            success=reason != "error" and self.env.spec.is_success(reward),
            turns=self.env.turns,
            horizon=self.horizon,
            end_reason=reason,
            sample=self.sample,
            tokens=len(self.ids),
        )


def rollout(
    model: PreTrainedModel | CompletionBackend,
    fmt: ChatFormat,
    jobs: Sequence[tuple[Task, int]],
    cfg: SamplingConfig,
    horizon: int | None = None,
    generator: torch.Generator | None = None,
    early_stop: EarlyStop | None = None,
    make: Callable[[str], Env] = make_env,
    sample_turn: TurnSampler | None = None,
    desc: str = "rollout",
) -> list[Episode]:
    """Play every (task, sample index) in `jobs`, `cfg.batch_size` at a time; turn limit `horizon` or the
    environment's own. `model` samples in process, or is a client of a completion server (`generator` then
    plays no part: the server draws); `sample_turn`, if given, samples each turn's replies instead (Best-of-N's
    chooser). `make` builds an environment by name (`EnvMaker`: some on servers). Returns the episodes in the
    order of `jobs`; with `early_stop`, only those that finished before it was reached. An episode whose
    environment server failed ends with `end_reason` "error"."""
    episodes: list[Episode] = []
    envs = sorted({task.env for task, _ in jobs})
    bar = progress_bar(total=len(jobs), desc=" ".join([desc, *envs[:3]]), unit="ep")
    sampled, start = 0, time.perf_counter()
    pool: dict[
        str, list[Env]
    ] = {}  # environments reused batch after batch (a ScienceWorld JVM starts in ~1 s)

    def report(ended: int, tokens: int, turn: int) -> None:
        """Every turn of every batch: the bar counts each episode as it ends, and shows the turn and speed."""
        nonlocal sampled
        sampled += tokens
        bar.update(ended)
        bar.set_postfix(turn=turn, tok_s=f"{sampled / (time.perf_counter() - start):.0f}")

    try:
        for first in range(0, len(jobs), cfg.batch_size):
            batch = jobs[first : first + cfg.batch_size]
            stop = partial(early_stop.reached, jobs) if early_stop else None
            done, _ = _play_batch(
                model, fmt, batch, cfg, horizon, generator, pool, make, episodes, stop, report, sample_turn
            )
            episodes += done
            if stop and stop(episodes):
                break
    finally:
        bar.close()
        for env in (e for envs in pool.values() for e in envs):
            env.close()
    return episodes


def start_batch(
    batch: Sequence[tuple[Task, int]],
    fmt: ChatFormat,
    horizon: int | None,
    pool: dict[str, list[Env]],
    make: Callable[[str], Env] = make_env,
) -> list[_Running]:
    """Reset one environment per (task, sample) of `batch`, reusing `pool`'s (one per concurrent episode of an
    environment, created on first need); turn limit `horizon` or each environment's own."""
    chosen: list[Env] = []
    taken: Counter[str] = Counter()
    for task, _ in batch:
        envs = pool.setdefault(task.env, [])
        if taken[task.env] == len(envs):
            envs.append(make(task.env))
        chosen.append(envs[taken[task.env]])
        taken[task.env] += 1
    resets = each(_reset, list(zip(chosen, (task for task, _ in batch), strict=True)))
    return [
        _Running(env, task, sample, turn_limit(env.spec, horizon), fmt, reset)
        for env, (task, sample), reset in zip(chosen, batch, resets, strict=True)
    ]


T = TypeVar("T")
R = TypeVar("R")


def each(fn: Callable[[tuple[Env, T]], R], items: list[tuple[Env, T]]) -> list[R]:
    """`fn` over (environment, argument) pairs, in order. Where every environment waits on another process
    (`Env.waits_on_process`: a sandbox, a server), on one thread per core, so that the waits overlap: colbench's
    test runs and apps' cells took 0.68-0.85 and 0.22 of an evaluation, one after another
    (`benchmarks/env_step_share.py`)."""
    workers = min(len(items), len(os.sched_getaffinity(0)))
    if workers < 2 or not all(env.waits_on_process for env, _ in items):
        return [fn(item) for item in items]
    with ThreadPoolExecutor(workers) as threads:
        return list(threads.map(fn, items))


def _reset(item: tuple[Env, Task]) -> str | EnvUnavailable:
    env, task = item
    try:
        return env.reset(task)
    except EnvUnavailable as e:
        return e


def _step(item: tuple[Env, str]) -> Step | EnvUnavailable:
    env, action = item
    try:
        return env.step(action)
    except EnvUnavailable as e:  # its server died or lost the session: the episode ends, the rest play on
        return e


TurnSampler = Callable[[list[_Running]], list[Completion]]
"""Samples one reply per running episode (each has its `task` and the `ids` its reply continues): what a batch
plays each turn, when not the model's own sample (Best-of-N's chooser, `gymflow.eval.best_of_n`)."""

Report = Callable[[int, int, int], None]
"""Hears after every turn of a batch (turn 0: its resets) how many episodes ended in it and how many tokens
it sampled: progress per episode, even where a whole evaluation is one batch of served environments."""


def _play_batch(
    model,
    fmt,
    batch,
    cfg,
    horizon,
    generator,
    pool,
    make=make_env,
    earlier=(),
    stop=None,
    report=None,
    sample_turn=None,
) -> tuple[list[Episode], int]:
    """Play one batch to the end, or until `stop(earlier + finished)` holds (the rest are cancelled); `report`
    (a `Report`) hears of every turn; `sample_turn` (a `TurnSampler`), if given, samples the replies."""
    running = start_batch(batch, fmt, horizon, pool, make)
    results: list[Episode | None] = [ep.finish("error") if ep.failed else None for ep in running]
    live = [i for i, ep in enumerate(running) if not ep.failed]  # still playing, in the decoder's row order
    if report:
        report(len(running) - len(live), 0, 0)
    decoder = None
    if sample_turn is None and isinstance(model, PreTrainedModel):
        decoder = Decoder(model, len(live), fmt.tokenizer.pad_token_id)
        sample_turn = partial(_decode_turn, decoder, fmt=fmt, cfg=cfg, generator=generator)
    elif sample_turn is None:
        sample_turn = partial(_request_turn, model, fmt=fmt, cfg=cfg)
    sampled, turn = 0, 0
    while live:
        replies = sample_turn([running[i] for i in live])
        turn += 1
        tokens = sum(len(reply.token_ids) for reply in replies)
        sampled += tokens
        actions = [_act(running[i], reply, fmt) for i, reply in zip(live, replies, strict=True)]
        steps = each(_step, [(running[i].env, action) for i, action in zip(live, actions, strict=True)])
        for i, reply, step in zip(live, replies, steps, strict=True):
            results[i] = _observe(running[i], reply, step, fmt, cfg)
        going = [row for row, i in enumerate(live) if results[i] is None]
        if decoder is not None and going:
            decoder.keep(going)  # one copy of the cache per turn; every token of the next turn reads it
        if report:
            report(len(live) - len(going), tokens, turn)
        live = [live[row] for row in going]
        if live and stop and stop([*earlier, *(r for r in results if r is not None)]):
            break
    return [r for r in results if r is not None], sampled


def _decode_turn(
    decoder: Decoder,
    running: list[_Running],
    fmt: ChatFormat,
    cfg: SamplingConfig,
    generator: torch.Generator | None,
) -> list[Completion]:
    """One reply per episode (one per decoder row) from the shared cache, fed only the ids it lacks."""
    logits = decoder.extend([ep.ids[ep.cached :] for ep in running])
    active = [True] * len(running)
    replies = decoder.decode(
        logits, active, cfg.max_new_tokens, [fmt.eos_id], cfg.temperature, cfg.top_p, generator
    )
    for ep, reply in zip(running, replies, strict=True):  # a reply's last id stays out of the cache
        ep.cached = len(ep.ids) + len(reply.token_ids) - 1
    return replies


def _request_turn(
    backend: CompletionBackend, running: list[_Running], fmt: ChatFormat, cfg: SamplingConfig
) -> list[Completion]:
    """One reply per episode in one batched request that carries each episode's whole sequence.

    No seed is sent: vLLM applies a request's seed to each of its prompts, so the samples of one task
    (identical prompts) would all get the same reply.
    """
    prompts = [ep.ids for ep in running]
    return backend.complete(prompts, cfg.max_new_tokens, [fmt.eos_id], cfg.temperature, cfg.top_p)


def _act(ep: _Running, reply: Completion, fmt: ChatFormat) -> str:
    """Record the reply; the action it names ("" when none parses: the environment says what is wrong)."""
    text = fmt.reply_text(reply.token_ids)
    action = parse_action(text, ep.env.spec.multiline_actions)
    ep.messages.append(
        Message(
            "assistant",
            text,
            action,
            token_ids=reply.token_ids,
            logprobs=reply.logprobs,
            critic_score=reply.critic_score,
        )
    )
    ep.ids += reply.token_ids
    return action or ""


def _observe(
    ep: _Running, reply: Completion, step: Step | EnvUnavailable, fmt: ChatFormat, cfg: SamplingConfig
) -> Episode | None:
    """Record what the environment answered `reply` and extend the sequence; the Episode if it ended."""
    if isinstance(step, EnvUnavailable):
        ep.messages.append(Message("user", f"(environment unavailable: {step})", reward=ep.env.reward))
        return ep.finish("error")
    ep.messages.append(Message("user", step.observation, reward=step.reward))
    if step.done:
        return ep.finish("done")
    if out_of_turns(ep.env, ep.horizon):
        return ep.finish("turn_limit")
    between = fmt.between(reply.token_ids, step.observation)
    if len(ep.ids) + len(between) + cfg.max_new_tokens > cfg.max_length:
        return ep.finish("length_limit")
    ep.ids += between
    return None


def episode_ids_and_mask(messages: Sequence[Message], fmt: ChatFormat) -> tuple[list[int], list[int]]:
    """An episode's full id sequence and its loss mask (1 on sampled reply ids), as the engine fed it.

    The last observation, which no reply follows, is not part of it.
    """
    ids, turns = episode_turns(messages, fmt)
    return ids, [min(t, 1) for t in turns]


def episode_turns(messages: Sequence[Message], fmt: ChatFormat) -> tuple[list[int], list[int]]:
    """An episode's full id sequence and, per id, the number of the reply it was sampled in (1, 2, ...), or 0
    for context (prompt, observations, template text)."""
    system, first, *rest = messages
    ids = fmt.prompt(system.text, first.text)
    turns = [0] * len(ids)
    for i in range(0, len(rest), 2):
        reply = rest[i]
        ids += reply.token_ids
        turns += [i // 2 + 1] * len(reply.token_ids)
        if i + 2 < len(rest):  # another reply follows this turn's observation
            between = fmt.between(reply.token_ids, rest[i + 1].text)
            ids += between
            turns += [0] * len(between)
    return ids, turns
