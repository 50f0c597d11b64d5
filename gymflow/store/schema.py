"""Parquet schemas of the rollout tables (`episodes`, `turns`) and the instruction table (`tasks`).

Every file carries `SCHEMA_VERSION` in its Parquet metadata; readers refuse files of another version
with an error that says how to rebuild them. Token columns exist from the start and stay empty
(null / empty lists) until a model samples them: expert trajectories have no sampled tokens. No column holds
a wall-clock time: a rerun with the same inputs writes the same bytes, so DVC reruns nothing after it
(timings go to the metrics files).
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 3  # 2: episode ids name the policy; 3: no wall time (a table's bytes follow from its inputs)
VERSION_KEY = b"gymflow.schema_version"

TASKS = pa.schema(
    [
        ("env", pa.string()),
        ("task_id", pa.string()),
        ("split", pa.string()),
        ("difficulty", pa.string()),
        ("seed", pa.int64()),
        ("instruction", pa.string()),
        ("hidden", pa.string()),  # JSON: training-time information the policy never sees
    ]
)

EPISODES = pa.schema(
    [
        ("episode_id", pa.string()),  # run/stage/iteration/env/task_id/sample
        ("run", pa.string()),
        ("stage", pa.string()),
        ("iteration", pa.int32()),
        ("policy", pa.string()),  # model path, or "expert:<solver>"
        ("policy_hash", pa.string()),  # content hash of the model (empty for experts)
        ("config_hash", pa.string()),  # hash of the parameters that produced the episode
        ("env", pa.string()),
        ("task_id", pa.string()),
        ("split", pa.string()),
        ("difficulty", pa.string()),
        ("group", pa.string()),  # same task, same iteration: the unit of group baselines
        ("sample", pa.int32()),
        ("seed", pa.int64()),
        ("reward", pa.float64()),
        ("success", pa.bool_()),
        ("turns", pa.int32()),  # assistant turns taken
        ("horizon", pa.int32()),  # the turn limit in force
        ("end_reason", pa.string()),  # done | turn_limit | length_limit | error
        ("tokens", pa.int32()),  # tokens in the whole sequence; null until a tokenizer exists
    ]
)

TURNS = pa.schema(
    [
        ("episode_id", pa.string()),
        ("turn", pa.int32()),  # message index in the conversation, 0 = system prompt
        ("role", pa.string()),  # system | user | assistant
        ("text", pa.string()),
        ("action", pa.string()),  # parsed action of an assistant turn
        ("reward", pa.float64()),  # episode reward after the environment answered (user turns)
        ("token_ids", pa.list_(pa.int32())),  # sampled token ids of an assistant turn, exactly as sampled
        ("logprobs", pa.list_(pa.float32())),  # their log-probabilities under the sampler
        ("critic_score", pa.float32()),
        ("advantage", pa.float32()),
    ]
)

# A critic's numbers for the assistant turns of episodes it did not play (SWEET-RL's offline data): keyed as the
# turns table is, one row per critic and turn, so `turns join critic_scores using (episode_id, turn)` shows
# which turns each critic blamed without copying the turns once per critic.
CRITIC_SCORES = pa.schema(
    [
        ("critic", pa.string()),  # its name in sweet.critics
        ("episode_id", pa.string()),
        ("turn", pa.int32()),
        ("critic_score", pa.float32()),  # `TurnCritic.score`: Eq. 3's advantage, or the value head's logit
        ("advantage", pa.float32()),  # the turn's advantage: Eq. 3 (= critic_score), or V after - V before
    ]
)

TABLES = {"tasks": TASKS, "episodes": EPISODES, "turns": TURNS, "critic_scores": CRITIC_SCORES}


def with_version(schema: pa.Schema) -> pa.Schema:
    return schema.with_metadata({VERSION_KEY: str(SCHEMA_VERSION).encode()})
