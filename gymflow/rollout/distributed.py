"""Where episodes are played: in this process, or spread over Ray workers (params.yaml's `rollout.engine`).

    where = Placement.of(params.rollout, policy="sft")
    episodes = play_jobs(model, fmt, jobs, sampling, where=where)

With Ray, each worker is an actor with its own copy of the model (or its own completion server, the
policy's i-th URL in `rollout.servers`) and its own environments (in process, or sessions on
`rollout.env_servers`, starting at its own server); the jobs go out as the local engine's batches
(`batch_size`), whole, so a batch is decoded exactly as one process decodes it. At temperature 0 the
episodes, ids and log-probabilities are the local engine's (up to float rounding of another thread count);
sampled, each batch draws from its own generator, seeded by the run's generator and the batch's index, so
the result does not depend on how many workers played it, but it is another draw than the local engine's one
stream. Ray runs inside the stage: DVC still runs and records the stage, Prefect still schedules it
(docs/design.md).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedModel

from gymflow.agent.chat import ChatFormat
from gymflow.config import RolloutParams
from gymflow.envs.base import Env, Task
from gymflow.errors import UserError
from gymflow.models.sampling import CompletionBackend
from gymflow.progress import bar as progress_bar
from gymflow.remote.env_client import EnvMaker
from gymflow.rollout.engine import EarlyStop, SamplingConfig, _play_batch, rollout
from gymflow.rollout.records import Episode


@dataclass(frozen=True)
class Placement:
    """Where one policy's episodes run: `rollout`'s placement keys, with the policy's completion servers."""

    engine: str = "local"
    workers: int = 2
    ray_address: str | None = None
    env_servers: dict[str, list[str]] = field(default_factory=dict)
    servers: tuple[str, ...] = ()  # this policy's completion servers, one per Ray worker (cycling)

    @classmethod
    def of(cls, cfg: RolloutParams, policy: str | None = None) -> Placement:
        urls = cfg.servers.get(policy) if policy else None
        servers = (urls,) if isinstance(urls, str) else tuple(urls or ())
        return cls(cfg.engine, cfg.workers, cfg.ray_address, dict(cfg.env_servers), servers)


LOCAL = Placement()  # every episode in this process, every environment in process


def play_jobs(
    model: PreTrainedModel | CompletionBackend,
    fmt: ChatFormat,
    jobs: Sequence[tuple[Task, int]],
    cfg: SamplingConfig,
    horizon: int | None = None,
    generator: torch.Generator | None = None,
    early_stop: EarlyStop | None = None,
    where: Placement = LOCAL,
) -> list[Episode]:
    """`rollout` of `jobs` as `where` says; the episodes in the order of `jobs`."""
    if where.engine == "local":
        return rollout(model, fmt, jobs, cfg, horizon, generator, early_stop, EnvMaker(where.env_servers))
    if early_stop is not None:
        raise UserError("rl.early_stop needs rollout.engine local: Ray workers play whole batches")
    return ray_rollout(model, fmt, jobs, cfg, horizon, generator, where)


class RolloutWorker:
    """One Ray actor: a model copy or a completion client, and environments kept from batch to batch."""

    def __init__(self, model: Any, fmt: ChatFormat, env_servers: dict[str, list[str]], index: int) -> None:
        from gymflow.models.openai_client import (
            CompletionClient,
        )  # openai: only a worker of a server needs it

        torch.set_num_threads(1)  # one core per worker, as Ray reserves it
        self.model = CompletionClient(model) if isinstance(model, str) else model
        if isinstance(self.model, PreTrainedModel):
            self.model.eval()
        self.fmt, self.make = fmt, EnvMaker(env_servers, offset=index)
        self.pool: dict[str, list[Env]] = {}

    def play(
        self,
        index: int,
        batch: list[tuple[Task, int]],
        cfg: SamplingConfig,
        horizon: int | None,
        seed: int | None,
        tally: Any = None,
    ) -> tuple[int, list[Episode]]:
        """Play batch `index`; every episode that ends is counted on `tally` (a `Tally` actor) at once."""
        generator = None if seed is None else torch.Generator().manual_seed(seed + index)

        def report(ended: int, tokens: int, turn: int) -> None:
            if ended and tally is not None:
                tally.add.remote(ended)  # not waited for

        with torch.inference_mode():
            episodes, _ = _play_batch(
                self.model, self.fmt, batch, cfg, horizon, generator, self.pool, self.make, report=report
            )
        return index, episodes

    def close(self) -> None:
        for env in (e for envs in self.pool.values() for e in envs):
            env.close()
        self.pool.clear()


class Tally:
    """A Ray actor counting the episodes the workers have finished, so the driver's bar moves per episode and
    not per batch (a batch of served environments can take many minutes)."""

    def __init__(self) -> None:
        self.count = 0

    def add(self, n: int) -> None:
        self.count += n

    def take(self) -> int:
        """The episodes finished since the last call."""
        n, self.count = self.count, 0
        return n


def ray_rollout(
    model: PreTrainedModel | CompletionBackend,
    fmt: ChatFormat,
    jobs: Sequence[tuple[Task, int]],
    cfg: SamplingConfig,
    horizon: int | None,
    generator: torch.Generator | None,
    where: Placement,
) -> list[Episode]:
    """Play `jobs` batch by batch on `where.workers` Ray actors; the episodes in the order of `jobs`."""
    import ray
    from ray.util import ActorPool

    batches = [list(jobs[i : i + cfg.batch_size]) for i in range(0, len(jobs), cfg.batch_size)]
    if not batches:
        return []
    join_ray(where)
    if isinstance(model, PreTrainedModel):
        shared = ray.put(model.cpu() if model.device.type != "cpu" else model)
        sources: Callable[[int], Any] = lambda i: shared  # noqa: E731
    elif where.servers:
        sources = lambda i: where.servers[i % len(where.servers)]  # noqa: E731
    else:
        raise UserError("Ray workers sample with a model or a completion server (rollout.servers)")
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= where.workers and not where.servers else 0
    actor = ray.remote(num_cpus=1, num_gpus=gpus)(RolloutWorker)
    workers = [
        actor.remote(sources(i), fmt, where.env_servers, i) for i in range(min(where.workers, len(batches)))
    ]
    seed = None if generator is None else int(torch.randint(2**62, (1,), generator=generator))
    done: dict[int, list[Episode]] = {}
    bar = progress_bar(total=len(jobs), desc=f"rollout ({len(workers)} ray workers)", unit="ep")
    tally = ray.remote(num_cpus=0)(Tally).remote()  # no CPU of its own: the workers hold them all
    try:
        pool = ActorPool(workers)
        for index, batch in enumerate(batches):
            pool.submit(lambda w, b: w.play.remote(b[0], b[1], cfg, horizon, seed, tally), (index, batch))
        while pool.has_next():
            with contextlib.suppress(TimeoutError):
                index, episodes = pool.get_next_unordered(timeout=1.0)
                done[index] = episodes
            bar.update(min(ray.get(tally.take.remote()), len(jobs) - bar.n))
        bar.update(len(jobs) - bar.n)  # a count still on its way to the tally
        ray.get([w.close.remote() for w in workers])
    finally:
        ray.kill(tally)
        bar.close()
        for w in workers:
            ray.kill(w)
    return [ep for index in range(len(batches)) for ep in done[index]]


def join_ray(where: Placement) -> None:
    """Join `where.ray_address`, or start a Ray instance on this machine (loopback only) with one CPU a
    worker; a stage joins once and keeps the connection for its later rollouts. Without an address Ray
    would join the cluster /tmp/ray/ray_current_cluster names, even one long gone: "local" starts our own."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no report home
    if where.ray_address:
        ray.init(address=where.ray_address, log_to_driver=False)
    else:
        ray.init(
            address="local",
            num_cpus=where.workers,
            include_dashboard=False,
            log_to_driver=False,
            _node_ip_address="127.0.0.1",
        )
