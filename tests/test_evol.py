"""AgentEvol's pieces on hand-made rollouts: which tasks are explored, what the filter keeps, the tokens it
trains on, and how the learning set is merged and scaled."""

from collections import Counter

import pytest
import torch

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig
from gymflow.envs import make_env
from gymflow.envs.instructions import build_splits
from gymflow.envs.maze import Maze
from gymflow.models.build import build_model
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.engine import SamplingConfig, episode_ids_and_mask, rollout
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import RunInfo
from gymflow.train.draws import draw_tasks
from gymflow.train.evol import chat_rows, kept_episodes, learning_set

TASKS = build_splits(Maze, 8, 0, seed=0)["train"]


@pytest.fixture(scope="module")
def fmt():
    env = make_env("maze")
    texts = [m.text for t in TASKS for m in run_expert(env, t).messages]
    return ChatFormat(train_tokenizer(texts * 3, 400))


@pytest.fixture(scope="module")
def explored(fmt, tmp_path_factory):
    """Two iterations of sampled maze episodes, with rewards set by hand: (folder, episodes per iteration)."""
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, layers=1, heads=2, kv_heads=2, max_length=1024)
    model = build_model(cfg, fmt.tokenizer).eval()
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12, batch_size=8)
    folder = tmp_path_factory.mktemp("explore")
    played = {}
    for iteration in (1, 2):
        gen = torch.Generator().manual_seed(iteration)
        eps = rollout(
            model, fmt, [(t, s) for t in TASKS[:3] for s in (0, 1)], sampling, horizon=2, generator=gen
        )
        # task 0: both samples succeed; task 1: sample 1 succeeds with a low reward; task 2: none
        for ep, (reward, success) in zip(
            eps, [(1, 1), (1, 1), (0, 0), (0.3, 1), (0, 0), (0, 0)], strict=True
        ):
            ep.reward, ep.success = float(reward), bool(success)
        info = RunInfo("main", "explore", iteration, "sft" if iteration == 1 else "evol1")
        write_episodes(folder, f"maze{iteration}", eps, info)
        played[iteration] = eps
    return folder, played


def test_exploration_draws_all_tasks_or_a_seeded_draw_that_changes_per_iteration():
    assert draw_tasks(TASKS, None, 0, 1) == TASKS and draw_tasks(TASKS, 100, 0, 1) == TASKS
    first, again, second = draw_tasks(TASKS, 5, 0, 1), draw_tasks(TASKS, 5, 0, 1), draw_tasks(TASKS, 5, 0, 2)
    assert first == again and len({t.task_id for t in first}) == 5 and first != second


def test_the_filter_keeps_this_iterations_successes_at_the_threshold(explored, fmt):
    folder, played = explored
    kept = kept_episodes(folder, 2, 0.0, fmt)
    assert [(k["task_id"], k["sample"]) for k in kept] == sorted(
        [(TASKS[0].task_id, 0), (TASKS[0].task_id, 1), (TASKS[1].task_id, 1)]
    )
    assert all(k["episode_id"].startswith("main/explore/2/evol1/") for k in kept)
    strict = kept_episodes(folder, 2, 0.5, fmt)  # a success with reward 0.3 falls below 0.5
    assert [(k["task_id"], k["sample"]) for k in strict] == [(TASKS[0].task_id, 0), (TASKS[0].task_id, 1)]
    assert kept_episodes(folder, 3, 0.0, fmt) == []


def test_kept_episodes_carry_the_sampled_ids_and_their_mask(explored, fmt):
    folder, played = explored
    by_key = {(ep.task.task_id, ep.sample): ep for ep in played[1]}
    for row in kept_episodes(folder, 1, 0.0, fmt):
        ep = by_key[(row["task_id"], row["sample"])]
        ids, mask = episode_ids_and_mask(ep.messages, fmt)
        assert (row["input_ids"], row["assistant_masks"]) == (ids, mask)
        sampled = [i for m in ep.messages if m.role == "assistant" for i in m.token_ids]
        assert [i for i, m in zip(ids, mask, strict=True) if m] == sampled  # trained on exactly these


def test_agenttraj_rows_mask_the_replies_as_the_engine_does(fmt):
    episode = run_expert(make_env("maze"), TASKS[0])
    for m in episode.messages:
        if m.role == "assistant":
            m.token_ids = fmt.encode(m.text + fmt.tokenizer.eos_token)
    chat = [{"role": m.role, "content": m.text} for m in episode.messages[:-1]]
    [row] = chat_rows(fmt.tokenizer, [{"messages": chat}])
    ids, mask = episode_ids_and_mask(episode.messages, fmt)
    # the template adds its newline after the last reply, outside the mask
    assert row["input_ids"][: len(ids)] == ids and row["assistant_masks"][: len(mask)] == mask
    assert not any(row["assistant_masks"][len(mask) :])


def _rows(name, n):
    """`n` rows whose ids differ from every other name's (not `hash`: salted per process, it can collide)."""
    return [{"input_ids": [*map(ord, name), i], "assistant_masks": [0] * len(name) + [1]} for i in range(n)]


def test_the_learning_set_merges_repeats_per_env_and_scales_by_epochs():
    sft, kept = {"maze": _rows("s", 2)}, {"maze": _rows("k", 1), "wordle": _rows("w", 1)}
    once = learning_set(kept, sft, {"maze": 2}, 1.0, seed=0)
    # maze: (2 SFT + 1 kept) x 2 passes; wordle, which SFT did not train on: 1 pass
    assert len(once) == 7
    counts = Counter(tuple(r["input_ids"]) for r in once)
    assert (
        counts[tuple(kept["maze"][0]["input_ids"])] == 2
        and counts[tuple(kept["wordle"][0]["input_ids"])] == 1
    )
    assert len(learning_set(kept, {}, {"maze": 2}, 1.0, seed=0)) == 3  # no merge: kept only
    half = learning_set(kept, sft, {"maze": 2}, 0.5, seed=0)
    assert len(half) == 4 and all(
        n <= counts[key] for key, n in Counter(tuple(r["input_ids"]) for r in half).items()
    )
    assert len(learning_set(kept, sft, {"maze": 2}, 2.5, seed=0)) == 2 * 7 + 4
    assert (
        learning_set(kept, sft, {"maze": 2}, 0.5, seed=0)
        == half
        != learning_set(kept, sft, {"maze": 2}, 0.5, 1)
    )
