"""Multi-turn RL from an agent: per iteration, K rollouts of each drawn train task with the current weights, then
one `PolicyGradient` update (LOOP Algorithm 1; the algorithm is `rl.algorithm`'s preset of switches).

Every iteration's episodes go to the rollout tables (stage "rl", the iteration's number; each reply carries the
advantage it was weighted with), its statistics to a CSV that `dvc plots` draws, and the learner's state to a
checkpoint (written whole or not at all), so an interrupted run resumes at the next iteration with the same
draws and ends with the outputs of a run that was never stopped. The turn limit of
training rollouts follows `rl.horizon` (ScalingInter-RL); evaluation keeps each environment's own.

Under `accelerate launch` the update is data-parallel (`gymflow.train.pg`). The first process plays the
iteration's episodes and broadcasts them: the others wait, all train on the same episodes. Every process
sampling the same episodes from the same seed would spare the broadcast but depends on bitwise-equal sampling on
every device, and would play each episode N times against environment servers and vLLM endpoints. The first
process alone writes rollouts, curve, checkpoints and model.
"""

from __future__ import annotations

import re
import shutil
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from accelerate import PartialState
from transformers import AutoModelForCausalLM

from gymflow.agent.chat import ChatFormat
from gymflow.config import RLParams, RolloutParams
from gymflow.envs import ENVS
from gymflow.envs.base import Task
from gymflow.models.build import load_tokenizer, lora_config
from gymflow.models.files import checkpoint_dir, save_model, weights_hash
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.distributed import LOCAL, Placement, play_jobs
from gymflow.rollout.engine import EarlyStop, SamplingConfig, episode_turns
from gymflow.rollout.records import Episode, RunInfo, config_hash
from gymflow.store.io import is_intact, table_path, write_csv
from gymflow.train.draws import draw_tasks, iteration_seed
from gymflow.train.pg import LearnerConfig, PolicyGradient, TokenEpisode, process_group
from gymflow.train.presets import switches
from gymflow.train.state import load_parts, load_state, save_run

# Wall-clock figures of an iteration: kept in the checkpoint for the metrics, left out of the curve, whose
# bytes then follow from the inputs alone (a rerun writes the same file).
TIMINGS = ("rollout_s", "update_s", "train_tokens_per_s", "seconds")
# How long the other processes wait for the first one's rollouts (torch's default, 10-30 min, ends a long
# iteration's run with a timeout).
ROLLOUT_WAIT = timedelta(hours=6)


def token_episodes(episodes: list[Episode], fmt: ChatFormat) -> list[TokenEpisode]:
    """Episodes as the learner's token sequences, exactly the ids sampled; a group per (env, task)."""
    groups: dict[tuple[str, str], int] = {}
    out = []
    for ep in episodes:
        ids, turns = episode_turns(ep.messages, fmt)
        group = groups.setdefault((ep.task.env, ep.task.task_id), len(groups))
        sampled = [lp for m in ep.messages if m.role == "assistant" for lp in m.logprobs]
        out.append(TokenEpisode(ids, turns, ep.reward, group, sampled))
    return out


def train_rl(
    start_dir: str,
    out_dir: Path,
    tasks: dict[str, list[Task]],
    rl: RLParams,
    rollout_cfg: RolloutParams,
    rollout_dir: Path,
    curve_path: Path,
) -> dict[str, Any]:
    """Train the agent in `start_dir` for `rl.iterations` and save it to `out_dir`; the run's summary (empty in
    all but the first of several processes)."""
    # joins the processes `accelerate launch` started (gloo on CPUs, NCCL on GPUs); one process: nothing to join
    processes = PartialState(cpu=not torch.cuda.is_available(), timeout=ROLLOUT_WAIT)
    tokenizer = load_tokenizer(start_dir)
    fmt = ChatFormat(tokenizer)
    model = AutoModelForCausalLM.from_pretrained(start_dir, dtype=torch.float32).to(processes.device)
    sampler = model
    if rl.lora_rank:
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(rl.lora_rank))
        sampler = model.get_base_model()  # the adapters are inside it: it samples with them
    sampling = SamplingConfig.from_rollout(rollout_cfg, temperature=rl.temperature)
    where = Placement.of(rollout_cfg)  # no policy name: it samples with the weights it trains, never a server
    config = LearnerConfig(
        switches=switches(rl),
        lr=rl.lr,
        temperature=rl.temperature,
        max_tokens=rl.max_tokens,
        pad_id=tokenizer.pad_token_id,
        seed=rl.seed,
        warmup=rl.warmup,
    )
    learner = PolicyGradient(model, config)
    run_key = config_hash([rl.model_dump(), sampling.__dict__, weights_hash(model), sorted(tasks)])
    checkpoint = checkpoint_dir(out_dir, run_key) / "state.pt"
    with processes.main_process_first():  # the first removes a checkpoint it cannot resume before others read
        rows = _restore(checkpoint, learner, rollout_dir)
    if not processes.is_main_process:
        for it in range(len(rows) + 1, rl.iterations + 1):
            run_iteration(learner, sampler, fmt, tasks, rl, sampling, it, rollout_dir, run_key, where)
        return {}
    if rows:
        print(f"resuming after iteration {len(rows)} from {checkpoint}")
    _clear_rollouts(rollout_dir, after=len(rows))
    for it in range(len(rows) + 1, rl.iterations + 1):
        row = run_iteration(learner, sampler, fmt, tasks, rl, sampling, it, rollout_dir, run_key, where)
        rows.append(row)
        _write_curve(curve_path, rows)
        _save(checkpoint, learner, rows)
        print(
            f"iteration {it}/{rl.iterations}: reward {row['reward']:.3f} success {row['success']:.3f} "
            f"kl {row['kl']:.4f} clip {row['clip_fraction']:.3f} filtered {row['filtered']:.2f}"
        )
    _write_curve(curve_path, rows)  # also when the checkpoint held every iteration and DVC removed it
    save_model(model, tokenizer, out_dir)
    shutil.rmtree(checkpoint.parent.parent, ignore_errors=True)
    return run_metrics(rows, rl)


def run_iteration(
    learner: PolicyGradient,
    sampler: torch.nn.Module,
    fmt: ChatFormat,
    tasks: dict[str, list[Task]],
    rl: RLParams,
    sampling: SamplingConfig,
    it: int,
    rollout_dir: Path,
    run_key: str,
    where: Placement = LOCAL,
) -> dict[str, Any] | None:
    """Collect K rollouts per drawn task (placed as `where` says), update once, and write the episodes; the
    iteration's statistics. Under several processes the first plays and writes (the others get None), all
    update. An episode whose environment server failed (`end_reason` error) is stored but not trained on: its
    reward is not its outcome."""
    if learner.rank > 0:
        batch = learner.prepare(_from_first_process(None))
        learner.step(batch)
        return None
    generator = torch.Generator().manual_seed(iteration_seed(rl.seed, it))
    limit = rl.turn_limit(it)
    early = EarlyStop(rl.early_stop, 4) if rl.early_stop else None
    policy_hash = weights_hash(learner.model)
    began = start = time.perf_counter()
    drawn = {env: draw_tasks(env_tasks, rl.tasks[env], rl.seed, it) for env, env_tasks in tasks.items()}
    episodes, jobs = sample_groups(sampler, fmt, drawn, rl.samples, sampling, generator, limit, early, where)
    rollout_s = time.perf_counter() - start
    played = [ep for ep in episodes if ep.end_reason != "error"]
    rollouts = _from_first_process(token_episodes(played, fmt))
    start = time.perf_counter()
    batch = learner.prepare(rollouts)
    stats = batch.stats | learner.step(batch)
    update_s = time.perf_counter() - start
    _record_advantages(played, rollouts, batch)
    info = RunInfo("main", "rl", it, f"{rl.algorithm}@{it - 1}", policy_hash, run_key)
    write_episodes(rollout_dir, f"it{it:03d}", episodes, info)
    row: dict[str, Any] = {
        "iteration": it,
        "turn_limit": limit or "",
        "episodes": len(episodes),
        "cancelled": jobs - len(episodes),
        "reward": _mean([ep.reward for ep in episodes]),
        "success": _mean([float(ep.success) for ep in episodes]),
    }
    for env in tasks:
        row[f"success_{env}"] = _mean([float(ep.success) for ep in episodes if ep.task.env == env])
    row |= {k: v for k, v in stats.items() if k != "aborted"} | {"aborted": int(stats["aborted"])}
    seconds = time.perf_counter() - began
    return row | {"rollout_s": round(rollout_s, 1), "update_s": round(update_s, 1), "seconds": seconds}


def sample_groups(
    sampler: torch.nn.Module,
    fmt: ChatFormat,
    drawn: dict[str, list[Task]],
    samples: int,
    sampling: SamplingConfig,
    generator: torch.Generator,
    limit: int | None = None,
    early: EarlyStop | None = None,
    where: Placement = LOCAL,
) -> tuple[list[Episode], int]:
    """`samples` rollouts of every drawn task (a group each), at most `limit` turns, placed as `where` says; the
    finished episodes and how many were asked for (early stop cancels the rest)."""
    sampler.eval()
    episodes: list[Episode] = []
    jobs = 0
    for env, env_tasks in drawn.items():
        env_jobs = [(t, k) for t in env_tasks for k in range(samples)]
        jobs += len(env_jobs)
        horizon = min(limit, ENVS[env].spec.max_turns) if limit else None
        episodes += play_jobs(sampler, fmt, env_jobs, sampling, horizon, generator, early, where)
    return episodes, jobs


def _from_first_process(rollouts: list[TokenEpisode] | None) -> list[TokenEpisode]:
    """The first process's episodes, in every process (as they are, in one)."""
    if process_group()[1] == 1:
        return rollouts
    box = [rollouts]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def run_metrics(rows: list[dict[str, Any]], rl: RLParams) -> dict[str, Any]:
    """The run in a few numbers: first and last iteration's training reward and success, and speed (the
    iterations' own times, so a resumed run counts those before the interruption too)."""
    first, last = rows[0], rows[-1]
    return {
        "algorithm": rl.algorithm,
        "iterations": len(rows),
        "episodes": sum(r["episodes"] for r in rows),
        "reward_first": round(first["reward"], 4),
        "reward_last": round(last["reward"], 4),
        "success_first": round(first["success"], 4),
        "success_last": round(last["success"], 4),
        "train_tokens_per_s": round(_mean([r["train_tokens_per_s"] for r in rows if r["steps"]])),
        "rollout_s": round(sum(r["rollout_s"] for r in rows), 1),
        "update_s": round(sum(r["update_s"] for r in rows), 1),
        "wall_seconds": round(sum(r.get("seconds", 0.0) for r in rows), 1),
    }


def _record_advantages(episodes: list[Episode], rollouts: list[TokenEpisode], batch) -> None:
    """Each reply's advantage (mean over its tokens) onto its message, for the turns table; dropped
    episodes (|A| below the threshold) keep none."""
    weighted = {id(r): adv for r, adv in zip(batch.episodes, batch.advantages, strict=True)}
    for ep, r in zip(episodes, rollouts, strict=True):
        adv = weighted.get(id(r))
        if adv is None:
            continue
        turns = torch.tensor(r.turns)
        replies = [m for m in ep.messages if m.role == "assistant"]
        for n, message in enumerate(replies, start=1):
            mine = turns == n
            if mine.any():
                message.advantage = float(adv[mine].mean())


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _write_curve(path: Path, rows: list[dict[str, Any]]) -> None:
    fields = [k for k in dict.fromkeys(k for row in rows for k in row) if k not in TIMINGS]
    rounded = [{k: (round(v, 5) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
    write_csv(path, rounded, fields)


def _parts(learner: PolicyGradient) -> dict[str, Any]:
    parts = {"model": learner.model, "optimizer": learner.optimizer, "scheduler": learner.scheduler}
    return parts | ({"value": learner.value.head} if learner.value is not None else {})


def _save(path: Path, learner: PolicyGradient, rows: list[dict[str, Any]]) -> None:
    bookkeeping = {"rows": rows, "generator": learner.generator.get_state()}
    if learner.value is not None:
        bookkeeping["value_warm"] = learner.value.warm
    save_run(path, _parts(learner), bookkeeping)


def _restore(path: Path, learner: PolicyGradient, rollout_dir: Path) -> list[dict[str, Any]]:
    """The rows of the iterations in the checkpoint at `path`, with the learner set to its state after them;
    none if there is no checkpoint. A checkpoint that cannot be read, or whose iterations' rollout tables are
    not all whole in `rollout_dir`, is removed and counts as none: the run starts afresh."""
    state = load_state(path)
    if state is None:
        return []
    # the episodes of the missing tables came from weights no longer at hand
    if not _rollouts_intact(rollout_dir, len(state["rows"])):
        print(f"{rollout_dir} lacks whole tables of iterations 1-{len(state['rows'])}: starting afresh")
        shutil.rmtree(path.parent)
        return []
    if "value_optimizer" in state:  # written before the value head joined the learner's optimizer
        print(f"{path} is from an older learner: starting afresh")
        shutil.rmtree(path.parent)
        return []
    rest = load_parts(state, _parts(learner))
    learner.generator.set_state(rest["generator"])
    if learner.value is not None:
        learner.value.warm = rest["value_warm"]
    return rest["rows"]


def _rollouts_intact(folder: Path, iterations: int) -> bool:
    """Whether the rollout tables of iterations 1..`iterations` (a checkpoint's) are all there and read whole."""
    return all(
        is_intact(table_path(folder, f"it{it:03d}", table), table)
        for it in range(1, iterations + 1)
        for table in ("episodes", "turns")
    )


def _clear_rollouts(folder: Path, after: int) -> None:
    """Remove the rollout tables of iterations after `after` (a fresh run: all of them)."""
    for path in folder.glob("it*.parquet"):
        number = re.match(r"it(\d+)\.", path.name)  # another name is no iteration's: left alone
        if number and int(number.group(1)) > after:
            path.unlink()
