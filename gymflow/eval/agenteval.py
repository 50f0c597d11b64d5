"""AgentEval: a policy plays the held-out split of each environment, greedily and with k samples.

Every episode goes to the rollout tables (stage "evaluate"; sample 0 is greedy, 1..k sampled), so results
can be re-cut in SQL; the summary per environment and difficulty is what `dvc metrics show` reads.
An environment whose rollouts were written with the same settings is not played again (resume).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gymflow.agent.chat import ChatFormat
from gymflow.config import EvalParams
from gymflow.envs.base import Task
from gymflow.eval.metrics import summarize
from gymflow.models.build import resolve
from gymflow.models.openai_client import CompletionClient
from gymflow.rollout.agenttraj import is_current, write_episodes
from gymflow.rollout.engine import SamplingConfig, rollout
from gymflow.rollout.records import Episode, RunInfo, config_hash
from gymflow.store.io import file_metadata, read_rows, table_path

SPEED_KEY = "gymflow.rollout_speed"


def evaluate_policy(
    name: str, model_dir: str | Path, tasks: dict[str, list[Task]], cfg: EvalParams, rollout_dir: Path
) -> dict[str, dict[str, Any]]:
    """Play every task of every environment with the policy in `model_dir`; metrics per environment."""
    source, server = resolve(model_dir), cfg.servers.get(name)
    device = "cuda" if torch.cuda.is_available() and not server else "cpu"
    model = AutoModelForCausalLM.from_pretrained(source).to(device).eval()
    fmt = ChatFormat(AutoTokenizer.from_pretrained(source))
    info = RunInfo(run="main", stage="evaluate", iteration=0, policy=name, policy_hash=_weights_hash(model))
    # With a server, it samples; the local copy only names the weights and gives the chat format.
    policy = CompletionClient(server) if server else model
    results = {}
    for env, env_tasks in tasks.items():
        how = cfg.model_dump(exclude={"envs", "policies"})  # which ones run does not change how one is played
        digest = config_hash([how, info.policy_hash, [t.task_id for t in env_tasks]])
        folder = rollout_dir / name
        if not is_current(folder, env, digest):
            generator = torch.Generator().manual_seed(cfg.seed)
            start = time.perf_counter()
            sampling = SamplingConfig(0.0, 1.0, cfg.max_new_tokens, cfg.max_length, cfg.batch_size)
            episodes = rollout(policy, fmt, [(t, 0) for t in env_tasks], sampling, generator=generator)
            if cfg.k:
                sampling = SamplingConfig(
                    cfg.temperature, cfg.top_p, cfg.max_new_tokens, cfg.max_length, cfg.batch_size
                )
                jobs = [(t, i) for t in env_tasks for i in range(1, cfg.k + 1)]
                episodes += rollout(policy, fmt, jobs, sampling, generator=generator)
            speed = rollout_speed(episodes, time.perf_counter() - start)
            metadata = {"gymflow.config_hash": digest, SPEED_KEY: json.dumps(speed)}
            write_episodes(folder, env, episodes, info, metadata)
        results[env] = summarize_file(table_path(folder, env, "episodes"), cfg.k)
    return results


def rollout_speed(episodes: list[Episode], seconds: float) -> dict[str, float]:
    """Episodes, environment steps and generated tokens per second of wall time."""
    generated = sum(len(m.token_ids or []) for ep in episodes for m in ep.messages if m.role == "assistant")
    return {
        "episodes_per_s": round(len(episodes) / seconds, 2),
        "steps_per_s": round(sum(ep.turns for ep in episodes) / seconds, 1),
        "tokens_per_s": round(generated / seconds),
    }


def summarize_file(path: Path, k: int) -> dict[str, Any]:
    """The metrics of one stored evaluation, read back from its episodes table; "all" carries the speed of
    the rollouts that wrote it."""
    summary = summarize(read_rows(path), k)
    summary["all"].update(json.loads(file_metadata(path).get(SPEED_KEY, "{}")))
    return summary


def _weights_hash(model: torch.nn.Module) -> str:
    """A content hash of the weights, so that rollouts name exactly the policy that made them."""
    h = hashlib.sha256()
    for tensor in model.state_dict().values():
        h.update(tensor.detach().to("cpu", torch.float32).numpy().tobytes())
    return h.hexdigest()[:12]
