"""Best-of-N with a turn-wise critic (SWEET-RL section 5.3, Figure 3a): at each turn a fixed policy samples N
candidate replies and the one a chooser ranks highest is executed.

A chooser is the critic (`CriticChooser`: its score, Eq. 3's advantage or the value head's logit; the critic
alone reads the task's hidden information) or a seeded random pick (`RandomChooser`, the baseline). N = 1 is
plain sampling: the same draws as the rollout engine with the same generator. Episodes come back as the engine
gives them (`Episode`, the executed reply's ids and log-probabilities as sampled), for `write_episodes`. The
policy's prompt is the engine's own (system prompt, observations, its own replies); no hidden text enters it.

    critic = load_critic("data/models/critic")
    episodes = best_of_n(policy, fmt, jobs, SamplingConfig(temperature=1.0), 8, CriticChooser(critic), generator)
    best_of_n_curve(policy, tasks, [1, 2, 4, 8, 16], "critic", lambda: CriticChooser(critic), sampling, 0, out)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import torch
from transformers import PreTrainedModel

from gymflow.agent.chat import ChatFormat
from gymflow.envs import ENVS, make_env
from gymflow.envs.base import Env, Task
from gymflow.eval.compare import paired
from gymflow.models.sampling import Completion, CompletionBackend, Decoder
from gymflow.rollout.agenttraj import is_current, write_episodes

# The engine's batch loop (reset, record a reply, step, extend the ids) with a sampler of its own: an episode
# played here is built exactly as one the engine plays.
from gymflow.rollout.engine import SamplingConfig, rollout
from gymflow.rollout.play import Policy
from gymflow.rollout.records import Episode, RunInfo, config_hash
from gymflow.store.io import read_rows, table_path
from gymflow.train.critic import CriticItem, TurnCritic

Pick = tuple[int, float | None]  # the candidate executed, and its critic score (None: no critic scored it)


class Chooser(Protocol):
    """Picks, per episode, which of its candidate replies to execute."""

    def __call__(
        self, tasks: Sequence[Task], contexts: Sequence[list[int]], candidates: Sequence[Sequence[Completion]]
    ) -> list[Pick]: ...


class CriticChooser:
    """The candidate the critic scores highest (the first of equal ones); the critic reads the task's hidden
    text (`Env.hidden_text`) if its variant does. Every episode's candidates are scored in one batch."""

    def __init__(self, critic: TurnCritic) -> None:
        self.critic = critic

    def __call__(
        self, tasks: Sequence[Task], contexts: Sequence[list[int]], candidates: Sequence[Sequence[Completion]]
    ) -> list[Pick]:
        items: list[CriticItem] = []
        for task, context, options in zip(tasks, contexts, candidates, strict=True):
            hidden = ENVS[task.env].hidden_text(task) if self.critic.config.hidden else ""
            items += [CriticItem(hidden, list(context), list(c.token_ids)) for c in options]
        scores = iter(self.critic.score(items))
        picks = []
        for options in candidates:
            mine = [next(scores) for _ in options]
            best = max(range(len(mine)), key=mine.__getitem__)  # max keeps the first of ties
            picks.append((best, mine[best]))
        return picks


class RandomChooser:
    """A uniform pick from its own seeded generator (the baseline); it never touches the sampler's draws."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(
        self, tasks: Sequence[Task], contexts: Sequence[list[int]], candidates: Sequence[Sequence[Completion]]
    ) -> list[Pick]:
        return [(self.rng.randrange(len(options)), None) for options in candidates]


def best_of_n(
    model: PreTrainedModel | CompletionBackend,
    fmt: ChatFormat,
    jobs: Sequence[tuple[Task, int]],
    cfg: SamplingConfig,
    n: int,
    choose: Chooser,
    generator: torch.Generator | None = None,
    horizon: int | None = None,
    make: Callable[[str], Env] = make_env,
) -> list[Episode]:
    """Play every (task, sample index) of `jobs` as the rollout engine does, `cfg.batch_size` episodes at a
    time, executing at each turn the chosen one of `n` sampled candidates; the episodes in the order of `jobs`."""
    if n < 1:
        raise ValueError(f"Best-of-N needs n >= 1, got {n}")
    if n > 1 and cfg.temperature == 0:
        raise ValueError("Best-of-N with greedy sampling (temperature 0) gives n equal candidates")

    def turn(running: list) -> list[Completion]:
        candidates = _candidates(model, fmt, running, cfg, n, generator)
        picks = choose([ep.task for ep in running], [ep.ids for ep in running], candidates)
        return [
            replace(options[pick], critic_score=score)
            for options, (pick, score) in zip(candidates, picks, strict=True)
        ]

    return rollout(
        model, fmt, jobs, cfg, horizon, generator, make=make, sample_turn=turn, desc=f"best-of-{n}"
    )


def _candidates(model, fmt, eps, cfg, n, generator) -> list[list[Completion]]:
    """`n` replies per episode to its current ids: what `sample` gives for n copies of each (the same draws
    from `generator`), but each context is encoded once and its cache repeated n times. At most
    max(batch_size, n) rows per call, so memory does not grow with n (with n = 1: one call, as the engine)."""
    per_call = max(1, cfg.batch_size // n)
    out: list[list[Completion]] = []
    for first in range(0, len(eps), per_call):
        group = eps[first : first + per_call]
        if isinstance(model, PreTrainedModel):
            replies = sample_copies(model, [list(ep.ids) for ep in group], n, cfg, fmt, generator)
        else:  # a server: each copy is its own prompt (its prefix cache shares the context)
            prompts = [list(ep.ids) for ep in group for _ in range(n)]
            replies = model.complete(prompts, cfg.max_new_tokens, [fmt.eos_id], cfg.temperature, cfg.top_p)
        out += [replies[k * n : (k + 1) * n] for k in range(len(group))]
    return out


@torch.no_grad()
def sample_copies(
    model: PreTrainedModel,
    prompts: Sequence[list[int]],
    n: int,
    cfg: SamplingConfig,
    fmt: ChatFormat,
    generator: torch.Generator | None = None,
) -> list[Completion]:
    """`sample(model, [p for p in prompts for _ in range(n)], ...)`, the n copies of a prompt encoded once: its
    cache rows are repeated (`Decoder.keep`) before the replies are drawn. Replies in that order."""
    decoder = Decoder(model, len(prompts), fmt.tokenizer.pad_token_id)
    logits = decoder.extend(prompts)
    rows = [k for k in range(len(prompts)) for _ in range(n)]
    if n > 1:
        decoder.keep(rows)
        logits = logits[torch.tensor(rows, device=logits.device)]
    active = [True] * len(rows)
    stop = [fmt.eos_id]
    return decoder.decode(logits, active, cfg.max_new_tokens, stop, cfg.temperature, cfg.top_p, generator)


def best_of_n_curve(
    policy: Policy,
    tasks: Sequence[Task],
    ns: Sequence[int],
    name: str,
    make_chooser: Callable[[], Chooser],
    cfg: SamplingConfig,
    seed: int,
    out_dir: Path,
    settings: Any = None,
    horizon: int | None = None,
) -> dict[str, dict[str, float]]:
    """Figure 3a for one chooser: each task played once per N of `ns`, the episodes written to
    `out_dir/<name>.n<N>.*.parquet` (stage "best_of_n", iteration N), a table already there from the same
    settings, weights and tasks kept. Every N starts from the same seed with a fresh chooser (`make_chooser`),
    so a rerun of one N alone plays the same, and every chooser sees the same draws at N = 1. Turn limit
    `horizon` or each environment's own. Per N: episodes, success, mean reward and mean turns."""
    out: dict[str, dict[str, float]] = {}
    jobs = [(t, 0) for t in tasks]
    for n in ns:
        prefix = f"{name}.n{n:02d}"
        how = [settings, cfg.__dict__, n, seed, horizon, policy.weights_hash, [t.task_id for t in tasks]]
        digest = config_hash(how)
        if not is_current(out_dir, prefix, digest):
            start = time.perf_counter()
            generator = torch.Generator().manual_seed(seed)
            episodes = best_of_n(policy.sampler, policy.fmt, jobs, cfg, n, make_chooser(), generator, horizon)
            seconds = time.perf_counter() - start
            print(f"{name} N={n}: {len(episodes)} episodes in {seconds:.1f} s")
            info = RunInfo("main", "best_of_n", n, f"{policy.name}+{name}", policy.weights_hash, digest)
            write_episodes(out_dir, prefix, episodes, info, {"gymflow.config_hash": digest})
        rows = read_rows(table_path(out_dir, prefix, "episodes"), "episodes")
        out[str(n)] = {
            "episodes": len(rows),
            "success": round(sum(bool(r["success"]) for r in rows) / len(rows), 4),
            "reward": round(sum(r["reward"] for r in rows) / len(rows), 4),
            "turns": round(sum(r["turns"] for r in rows) / len(rows), 2),
        }
    return out


def chooser_success(out_dir: Path, name: str, n: int) -> dict[str, float]:
    """{task_id: success} of one chooser's Best-of-N episodes at `n` (one episode a task)."""
    rows = read_rows(table_path(out_dir, f"{name}.n{n:02d}", "episodes"), "episodes")
    return {r["task_id"]: float(r["success"]) for r in rows}


def paired_choosers(out_dir: Path, names: Sequence[str], ns: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per pair of choosers (each against the random pick, the first against the second) and per N > 1, the
    per-task paired difference of success on the same held-out tasks (`Paired.to_dict`): Figure 3a's orderings
    with standard errors that pool exactly over seeds. At N = 1 every chooser plays the same draws."""
    critics = [c for c in names if c != "random"]
    pairs = [(c, "random") for c in critics] + list(zip(critics, critics[1:], strict=False))
    return {
        f"{a}_vs_{b}": {
            str(n): paired(chooser_success(out_dir, a, n), chooser_success(out_dir, b, n)).to_dict()
            for n in ns
            if n > 1
        }
        for a, b in pairs
    }
