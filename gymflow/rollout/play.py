"""Play tasks with a stored policy and keep every episode in the rollout tables.

Shared by evaluation and AgentEvol's exploration. An environment's tables carry a hash of what was played
(settings, the weights, the jobs), so a rerun with the same ones plays nothing again: an interrupted stage
resumes from the environments it had not finished. Each table also has a second name beside the tracked
folder (`shadow`), because DVC empties a stage's output folder before running it: only a `persist` output
survives, and a stage with one is never restored from DVC's run-cache, so every experiment replayed every
evaluation and exploration it shared with the last one.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from gymflow.agent.chat import ChatFormat
from gymflow.envs.base import Task
from gymflow.models.build import load_tokenizer, resolve
from gymflow.models.files import weights_hash
from gymflow.models.openai_client import CompletionClient
from gymflow.rollout.agenttraj import is_current, write_episodes
from gymflow.rollout.distributed import LOCAL, Placement, play_jobs
from gymflow.rollout.engine import SamplingConfig
from gymflow.rollout.records import Episode, RunInfo, config_hash
from gymflow.store.io import atomic_path, file_metadata, table_path, write_text


@dataclass
class Policy:
    name: str
    sampler: PreTrainedModel | CompletionClient  # the local model, or a client of the server that samples
    fmt: ChatFormat
    weights_hash: str  # names exactly the weights that played


def load_policy(name: str, model_dir: str | Path, server: str | None = None) -> Policy:
    """The model in `model_dir`; with a server, it samples and the local copy only names the weights and gives
    the chat format."""
    source = resolve(model_dir)
    device = "cuda" if torch.cuda.is_available() and not server else "cpu"
    model = AutoModelForCausalLM.from_pretrained(source).to(device).eval()
    fmt = ChatFormat(load_tokenizer(source))
    return Policy(name, CompletionClient(server) if server else model, fmt, weights_hash(model))


def play(
    policy: Policy,
    runs: Sequence[tuple[Sequence[tuple[Task, int]], SamplingConfig]],
    seed: int,
    folder: Path,
    prefix: str,
    info: RunInfo,
    settings: Any,
    where: Placement = LOCAL,
) -> Path:
    """Play each (jobs, sampling) of `runs` in order from one seeded generator, as `where` places them, and
    write the episodes to `folder/<prefix>.*.parquet`, unless they are there already from the same
    `settings`, weights and jobs. Returns the episodes table."""
    jobs = [[(t.task_id, i) for t, i in run] for run, _ in runs]
    digest = config_hash([settings, policy.weights_hash, jobs])
    if is_current(folder, prefix, digest):
        return table_path(folder, prefix, "episodes")
    if is_current(shadow(folder), prefix, digest):
        _link(shadow(folder), folder, prefix)
    else:
        generator = torch.Generator().manual_seed(seed)
        start = time.perf_counter()
        episodes = [
            ep
            for run, sampling in runs
            for ep in play_jobs(policy.sampler, policy.fmt, run, sampling, generator=generator, where=where)
        ]
        speed = rollout_speed(episodes, time.perf_counter() - start)
        write_text(speed_path(folder, prefix), json.dumps({"config_hash": digest, **speed}) + "\n")
        write_episodes(folder, prefix, episodes, info, {"gymflow.config_hash": digest})
        _link(folder, shadow(folder), prefix)
    return table_path(folder, prefix, "episodes")


def shadow(folder: Path) -> Path:
    """Where the tables `play` wrote to `folder` keep a second name: beside it, not in it, so DVC neither hashes
    nor deletes it. A hard link costs no space; the stage's output stays an ordinary, run-cached one."""
    return folder.parent / f".{folder.name}.shadow"


def _link(source: Path, target: Path, prefix: str) -> None:
    """Give `source`'s tables of `prefix` a name in `target` (a copy where the file system has no hard links),
    each replacing the old name at once."""
    for kind in ("episodes", "turns"):
        src = table_path(source, prefix, kind)
        with atomic_path(table_path(target, prefix, kind)) as tmp:  # its stale temporaries cleared too
            tmp.unlink()
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copyfile(src, tmp)


def drop_others(folder: Path, prefixes: Sequence[str]) -> None:
    """Delete the tables (and speeds) in `folder` and its shadow of every prefix but `prefixes`. Tables are kept
    across runs, so that a rerun plays only what changed; an environment the run no longer plays must not stay behind, where
    AgentEvol would learn from it (another tokenizer's ids, after a change of model) and SQL would count it."""
    for path in sorted([*folder.glob("*.parquet"), *shadow(folder).glob("*.parquet")]):
        prefix = path.name.removesuffix(".parquet").rsplit(".", 1)[0]
        if prefix not in prefixes:
            path.unlink()
            speed_path(folder, prefix).unlink(missing_ok=True)


def speed_path(folder: Path, prefix: str) -> Path:
    """Where the speed of the rollouts in `folder/<prefix>.*` waits for the metrics: beside the tracked folder,
    not in it, so that the tables' bytes follow from what was played (a rerun writes the same files)."""
    return folder.parent / f".{folder.name}.speed" / f"{prefix}.json"


def stored_speed(episodes: Path) -> dict[str, float]:
    """The speed recorded when the episodes table `episodes` was played; empty if there is none for it."""
    path = speed_path(episodes.parent, episodes.name.removesuffix(".episodes.parquet"))
    try:
        speed = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    digest = speed.pop("config_hash", None) if isinstance(speed, dict) else None
    return speed if digest == file_metadata(episodes).get("gymflow.config_hash") else {}


def rollout_speed(episodes: list[Episode], seconds: float) -> dict[str, float]:
    """Episodes, environment steps and generated tokens per second of wall time."""
    generated = sum(len(m.token_ids or []) for ep in episodes for m in ep.messages if m.role == "assistant")
    return {
        "episodes_per_s": round(len(episodes) / seconds, 2),
        "steps_per_s": round(sum(ep.turns for ep in episodes) / seconds, 1),
        "tokens_per_s": round(generated / seconds),
    }
