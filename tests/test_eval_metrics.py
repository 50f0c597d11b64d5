import io
import itertools

import pytest
from rich.console import Console
from rich.table import Table

from gymflow.envs.apps.env import Apps
from gymflow.envs.maze import Maze
from gymflow.eval.agenteval import noop_rewards
from gymflow.eval.metrics import pass_at_k, success_metrics
from stages.evaluate import summary_table


def test_pass_at_k_by_hand():
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # C(3,2)/C(4,2) pairs miss the one success
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def row(task_id, difficulty, success, sample, turns=3):
    return {
        "task_id": task_id,
        "difficulty": difficulty,
        "success": success,
        "reward": float(success),
        "turns": turns,
        "sample": sample,
    }


def test_summary_per_difficulty_and_pass_at_k():
    greedy = [row("a", "5x5", True, 0, 2), row("b", "5x5", False, 0, 15), row("c", "7x7", False, 0, 15)]
    sampled = [row("a", "5x5", s, i) for i, s in ((1, True), (2, False))]
    sampled += [row("b", "5x5", s, i) for i, s in ((1, False), (2, True))]
    sampled += [row("c", "7x7", False, i) for i in (1, 2)]
    out = success_metrics(greedy + sampled, k=1)
    assert out["all"] == {
        "n": 3,
        "success": pytest.approx(1 / 3, abs=1e-4),
        "reward": pytest.approx(1 / 3, abs=1e-4),
        "turns": pytest.approx(32 / 3, abs=0.01),
        "pass@1": pytest.approx(1 / 3, abs=1e-4),
    }
    assert out["5x5"]["success"] == 0.5 and out["5x5"]["pass@1"] == 0.5 and out["7x7"]["pass@1"] == 0.0
    assert "pass@1" not in success_metrics(greedy, k=1)["all"]  # no samples, no pass@k


def test_scenario_goal_completion_needs_every_variant_and_skips_cut_scenarios():
    # scenario s1: all 3 pass; s2: 2 of 3 pass (TGC counts them, SGC does not); s3: only 2 variants drawn
    greedy = [row(f"s1_{v}", "1", True, 0) for v in (1, 2, 3)]
    greedy += [row("s2_1", "1", True, 0), row("s2_2", "1", False, 0), row("s2_3", "1", True, 0)]
    greedy += [row("pay_back-17_1", "2", True, 0), row("pay_back-17_2", "2", True, 0)]
    greedy += [row("s1_1", "1", False, 1)]  # a sampled episode is not part of SGC
    out = success_metrics(greedy, k=0, variants=3)
    assert out["1"]["success"] == pytest.approx(5 / 6, abs=1e-4)  # TGC: 5 of 6 tasks
    assert out["1"]["sgc"] == 0.5 and out["1"]["scenarios"] == 2
    assert out["2"]["sgc"] == 0.0 and out["2"]["scenarios"] == 0  # its scenario is incomplete: not counted
    assert out["all"]["sgc"] == 0.5 and out["all"]["scenarios"] == 2
    assert "sgc" not in success_metrics(greedy, k=0)["all"]  # environments without scenarios


def test_rollout_speed_counts_episodes_steps_and_generated_tokens():
    from gymflow.envs.base import Task
    from gymflow.rollout.play import rollout_speed
    from gymflow.rollout.records import Episode, Message

    task = Task(env="maze", task_id="t", split="eval", difficulty="5x5", seed=0, instruction="", hidden={})

    def episode(replies):
        messages = [Message("system", "s"), Message("user", "o")]
        for ids in replies:  # observations carry no sampled ids and must not count
            messages += [Message("assistant", "a", token_ids=ids), Message("user", "o")]
        return Episode(task, messages, 0.0, False, len(replies), 15, "done")

    speed = rollout_speed([episode([[1, 2, 3], [4]]), episode([[5, 6]])], seconds=2.0)
    assert speed == {"episodes_per_s": 1.0, "steps_per_s": 1.5, "tokens_per_s": 3}


def test_the_noop_floor_per_difficulty_where_ending_at_once_pays():
    """apps: the mean of each task's no-op reward per difficulty and over all; maze pays nothing for it."""
    tasks = list(itertools.islice(Apps.generate("eval", 0), 12))
    floors = noop_rewards("apps", tasks)
    assert set(floors) == {"all"} | {t.difficulty for t in tasks}
    for level in {t.difficulty for t in tasks}:
        mine = [Apps.noop_reward(t) for t in tasks if t.difficulty == level]
        assert floors[level] == pytest.approx(sum(mine) / len(mine), abs=1e-4)
    assert 0 < floors["all"] < 1
    assert noop_rewards("maze", list(itertools.islice(Maze.generate("eval", 0), 3))) == {}


def rendered(table: Table) -> list[list[str]]:
    """The table's body rows as printed (the header is drawn with other lines), each a list of its cells."""
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(table)
    lines = [line.strip("│ ") for line in console.export_text().splitlines() if line.startswith("│")]
    return [[cell.strip() for cell in line.split("│")] for line in lines]


def test_the_evaluate_table_shows_the_noop_floor_beside_apps_reward():
    metrics = {
        "maze": {"all": {"success": 0.5, "reward": 0.5}},
        "apps": {"all": {"success": 0.0, "reward": 0.3, "noop_reward": 0.52}},
    }
    assert rendered(summary_table("sft", metrics, ["maze", "apps"])) == [
        ["success", "0.50", "0.00"],
        ["reward", "0.50", "0.30"],
        ["no-op reward", "-", "0.52"],
    ]
    assert [row[0] for row in rendered(summary_table("sft", {"maze": metrics["maze"]}, ["maze"]))] == [
        "success",
        "reward",
    ]
