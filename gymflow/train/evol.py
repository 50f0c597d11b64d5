"""AgentEvol (AgentGym Algorithm 1): explore, keep what succeeded, learn; rejection fine-tuning and expert
iteration (LOOP C.2, C.3) are the same loop with other settings.

- explore: an agent plays a draw of train tasks, K samples each at a temperature; every episode goes to the
  rollout tables (stage "explore", the iteration's number);
- filter: `KEPT_SQL` over those tables, so the same question can be asked of any iteration in `gymflow sql`;
- learn: the kept episodes, token for token as they were sampled, plus (`merge_sft`) the SFT data with the
  passes `sft.envs` gives each environment, all scaled by `epochs`, trained from `init`, `sft` or the explorer.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
from transformers import PreTrainedTokenizerBase

from gymflow.agent.chat import ChatFormat
from gymflow.config import EvolConfig, RolloutParams, SFTParams
from gymflow.envs.base import Task
from gymflow.rollout.distributed import Placement
from gymflow.rollout.engine import SamplingConfig, episode_ids_and_mask
from gymflow.rollout.play import drop_others, load_policy, play
from gymflow.rollout.records import Message, RunInfo
from gymflow.store.db import connect
from gymflow.store.io import write_table
from gymflow.train.draws import draw_tasks, iteration_seed
from gymflow.train.sft import conversations

# The filter: explored episodes of one iteration that succeeded (each environment's own rule: AgentGym's binary
# reward) with a reward of at least the threshold (BabyAI's reward of a success shrinks with its length).
KEPT_SQL = """
select env, episode_id, task_id, sample, reward, turns from episodes
where stage = 'explore' and iteration = $iteration and success = 1 and reward >= $threshold
order by env, task_id, sample
"""
# `evol.keep: shortest`: of a task's kept episodes, the one of fewest turns (the filter then prefers the
# explorer's better routes to a task, not only its lucky ones)
SHORTEST_SQL = f"""
select * from ({KEPT_SQL.strip()})
qualify row_number() over (partition by env, task_id order by turns, sample) = 1
order by env, task_id, sample
"""

KEPT_SCHEMA = pa.schema(
    [
        ("env", pa.string()),
        ("episode_id", pa.string()),
        ("task_id", pa.string()),
        ("sample", pa.int32()),
        ("reward", pa.float64()),
        ("turns", pa.int32()),
        ("input_ids", pa.list_(pa.int32())),  # the episode as the engine fed it, reply ids as sampled
        ("assistant_masks", pa.list_(pa.int8())),  # 1 on the reply ids: the loss
    ]
)

Row = dict[str, list[int]]  # a training example: input_ids and assistant_masks (1 where the loss is)


def explore(
    explorer: str,
    model_dir: Path,
    tasks: dict[str, list[Task]],
    settings: EvolConfig,
    rollout_cfg: RolloutParams,
    iteration: int,
    out_dir: Path,
) -> dict[str, dict[str, Any]]:
    """The explorer plays each environment's drawn tasks `settings.samples` times; per environment, how many
    episodes it played, their success and the rollout speed."""
    policy = load_policy(explorer, model_dir, rollout_cfg.server_for(explorer))
    where = Placement.of(rollout_cfg, explorer)
    info = RunInfo("main", "explore", iteration, explorer, policy.weights_hash)
    sampling = SamplingConfig.from_rollout(rollout_cfg, temperature=settings.temperature)
    how = [sampling.__dict__, settings.seed]
    drop_others(out_dir, list(tasks))
    for env, env_tasks in tasks.items():
        drawn = draw_tasks(env_tasks, settings.tasks[env], settings.seed, iteration)
        jobs = [(t, i) for t in drawn for i in range(settings.samples)]
        seed = iteration_seed(settings.seed, iteration)
        play(policy, [(jobs, sampling)], seed, out_dir, env, info, how, where)
    db = connect(out_dir)
    rows = db.execute(
        """select env, count(*), avg(success), count(distinct task_id) filter (where success = 1)
           from episodes group by env order by env"""
    ).fetchall()
    return {
        env: {"episodes": n, "success": round(rate, 4), "tasks_solved": solved}
        for env, n, rate, solved in rows
    }


def kept_episodes(
    rollout_dir: Path, iteration: int, threshold: float, fmt: ChatFormat, keep: str = "all"
) -> list[dict[str, Any]]:
    """The filter (`KEPT_SQL`, or `SHORTEST_SQL` for keep "shortest"), with each kept episode's token ids and
    loss mask as the engine sampled them."""
    db = connect(rollout_dir)
    sql = SHORTEST_SQL if keep == "shortest" else KEPT_SQL
    kept = db.execute(sql, {"iteration": iteration, "threshold": threshold}).fetchall()
    turns = db.execute(
        "select episode_id, role, text, token_ids from turns where list_contains($ids, episode_id) "
        "order by episode_id, turn",
        {"ids": [k[1] for k in kept]},
    ).fetchall()
    messages: dict[str, list[Message]] = {}
    for episode_id, role, text, token_ids in turns:
        messages.setdefault(episode_id, []).append(Message(role, text, token_ids=token_ids or []))
    out = []
    for env, eid, task, sample, reward, turns_taken in kept:
        ids, mask = episode_ids_and_mask(messages[eid], fmt)
        out.append(
            {"env": env, "episode_id": eid, "task_id": task, "sample": sample, "reward": reward}
            | {"turns": turns_taken, "input_ids": ids, "assistant_masks": mask}
        )
    return out


def chat_rows(tokenizer: PreTrainedTokenizerBase, convs: list[dict[str, Any]]) -> list[Row]:
    """Conversations (AgentTraj text) as training rows, tokenized by the chat template as SFT tokenizes them."""
    rows = []
    for conv in convs:
        out = tokenizer.apply_chat_template(
            conv["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        rows.append({"input_ids": list(out["input_ids"]), "assistant_masks": list(out["assistant_masks"])})
    return rows


def learning_set(
    kept: dict[str, list[Row]], sft: dict[str, list[Row]], passes: dict[str, int], epochs: float, seed: int
) -> list[Row]:
    """Per environment, its SFT rows and kept rows repeated `passes[env]` times (1 for an environment SFT did
    not train on); then `epochs` passes over all of it, a fraction being a seeded draw without repeats."""
    envs = list(dict.fromkeys([*sft, *kept]))
    base = [row for env in envs for row in (sft.get(env, []) + kept.get(env, [])) * passes.get(env, 1)]
    whole, fraction = divmod(epochs, 1)
    return base * int(whole) + random.Random(seed).sample(base, round(fraction * len(base)))


def learner(settings: EvolConfig, explorer: str, sft: SFTParams) -> tuple[str, SFTParams]:
    """Where an iteration's learning starts (the agent under data/models) and how it trains: SFT's settings
    with the iteration's seed and learning rate. AgentEvol's control starts and trains the same way."""
    start = {"init": "init", "sft": "sft", "last": explorer}[settings.learn_from]
    return start, sft.model_copy(update={"seed": settings.seed, "lr": settings.lr or sft.lr})


def matched_set(sft: dict[str, list[Row]], passes: dict[str, int], rows: int, seed: int) -> list[Row]:
    """The control's learning set: the SFT data alone (`passes` per environment), as many rows as the method it
    controls learned from (whole passes, then a seeded draw without repeats), so both take the same steps."""
    base = [row for env in sft for row in sft[env] * passes.get(env, 1)]
    if not base:
        return []
    whole, part = divmod(rows, len(base))
    return base * whole + random.Random(seed).sample(base, part)


def write_kept(path: Path, kept: list[dict[str, Any]]) -> None:
    """The iteration's filtered data set: kept episodes with the exact ids and mask they are trained on."""
    write_table(path, pa.Table.from_pylist(kept, schema=KEPT_SCHEMA))


def sft_rows(data_dir: Path, envs: list[str], tokenizer: PreTrainedTokenizerBase) -> dict[str, list[Row]]:
    """The SFT data (AgentTraj) of `envs` as training rows, per environment."""
    return {env: chat_rows(tokenizer, conversations(data_dir, [env])) for env in envs}
