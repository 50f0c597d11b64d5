"""Rollout tables: round trip, schema version, atomic writes, DuckDB views."""

import pyarrow.parquet as pq
import pytest

from gymflow.envs.base import Task
from gymflow.errors import UserError
from gymflow.rollout.records import Episode, Message, RunInfo, episode_rows
from gymflow.store.db import connect
from gymflow.store.io import atomic_path, read_rows, table_path, write_rows
from gymflow.store.schema import SCHEMA_VERSION, VERSION_KEY

TASK = Task("maze", "m-1", "train", "5x5", 3, "Reach the goal at 1,1.", {"goal": [1, 1]})
INFO = RunInfo(run="r", stage="test", iteration=2, policy="p", config_hash="abc")


def make_episode(sample: int, reward: float) -> Episode:
    msgs = [
        Message("system", "sys"),
        Message("user", "pos 0,0"),
        Message(
            "assistant",
            "Thought: go\nAction: move down",
            "move down",
            token_ids=[5, 6, 7],
            logprobs=[-0.1, -0.2, -0.3],
        ),
        Message("user", "pos 1,0", reward=reward),
    ]
    return Episode(TASK, msgs, reward, reward >= 1, 1, 15, "done", sample=sample)


def test_round_trip_keeps_every_field(tmp_path):
    rows = [episode_rows(make_episode(s, float(s)), INFO) for s in range(2)]
    write_rows(table_path(tmp_path, "maze", "episodes"), "episodes", [e for e, _ in rows])
    write_rows(table_path(tmp_path, "maze", "turns"), "turns", [t for _, ts in rows for t in ts])
    episodes = read_rows(table_path(tmp_path, "maze", "episodes"))
    turns = read_rows(table_path(tmp_path, "maze", "turns"))
    assert [e["reward"] for e in episodes] == [0.0, 1.0]
    assert episodes[1]["episode_id"] == "r/test/2/p/maze/m-1/1" and episodes[1]["group"] == "m-1@2"
    assert episodes[0]["tokens"] is None  # no tokenizer yet
    assistant = [t for t in turns if t["role"] == "assistant"][0]
    assert assistant["token_ids"] == [5, 6, 7]
    assert assistant["logprobs"] == pytest.approx([-0.1, -0.2, -0.3])
    assert [t["turn"] for t in turns[:4]] == [0, 1, 2, 3]
    assert (
        pq.read_schema(table_path(tmp_path, "maze", "turns")).metadata[VERSION_KEY]
        == str(SCHEMA_VERSION).encode()
    )


def test_views_join_episodes_and_turns(tmp_path):
    rows = [episode_rows(make_episode(s, float(s % 2)), INFO) for s in range(4)]
    write_rows(table_path(tmp_path / "a", "maze", "episodes"), "episodes", [e for e, _ in rows[:2]])
    write_rows(table_path(tmp_path / "b" / "c", "maze", "episodes"), "episodes", [e for e, _ in rows[2:]])
    write_rows(table_path(tmp_path / "a", "maze", "turns"), "turns", [t for _, ts in rows for t in ts])
    db = connect(tmp_path)
    assert db.execute("select count(*), sum(reward) from episodes").fetchone() == (4, 2.0)
    assert db.execute("select avg(success) from episodes").fetchone() == (0.5,)  # success is 0/1: a rate
    n = db.execute(
        "select count(*) from turns join episodes using (episode_id) where role = 'assistant'"
    ).fetchone()
    assert n == (4,)
    assert db.execute("select count(*) from tasks").fetchone() == (0,)  # empty view, right columns


def test_critic_scores_join_the_turns_they_score_and_a_chosen_reply_keeps_its_score(tmp_path):
    """Offline turns scored by two critics: one row per critic and turn, joined on (episode_id, turn); an
    episode whose reply a critic chose stores that score on the turn itself."""
    chosen = make_episode(1, 1.0)
    chosen.messages[2].critic_score = 0.25
    rows = [episode_rows(make_episode(0, 0.0), INFO), episode_rows(chosen, INFO)]
    write_rows(table_path(tmp_path, "maze", "episodes"), "episodes", [e for e, _ in rows])
    write_rows(table_path(tmp_path, "maze", "turns"), "turns", [t for _, ts in rows for t in ts])
    offline = rows[0][0]["episode_id"]
    scores = [
        {"critic": c, "episode_id": offline, "turn": 2, "critic_score": v, "advantage": v}
        for c, v in (("hidden", -1.5), ("nohidden", 0.5))
    ]
    write_rows(tmp_path / "critics" / "x.critic_scores.parquet", "critic_scores", scores)
    db = connect(tmp_path)
    joined = db.execute(
        "select s.critic, t.action, s.critic_score from turns t join critic_scores s using (episode_id, turn) "
        "order by s.critic_score"
    ).fetchall()
    assert joined == [("hidden", "move down", -1.5), ("nohidden", "move down", 0.5)]
    stored = db.execute(
        "select episode_id, critic_score from turns where role = 'assistant' order by 1"
    ).fetchall()
    assert stored == [(offline, None), (rows[1][0]["episode_id"], 0.25)]


def test_wrong_schema_version_is_refused(tmp_path):
    path = table_path(tmp_path, "x", "episodes")
    write_rows(path, "episodes", [])
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({VERSION_KEY: b"0"}), path)
    with pytest.raises(UserError, match="schema version 0.*dvc repro"):
        read_rows(path)
    with pytest.raises(UserError, match="schema version"):
        connect(tmp_path)


def test_failed_write_leaves_old_file_and_no_temp(tmp_path):
    path = table_path(tmp_path, "maze", "episodes")
    write_rows(path, "episodes", [episode_rows(make_episode(0, 1.0), INFO)[0]])
    with pytest.raises(Exception):  # noqa: B017 (any error in the middle of a write)
        write_rows(path, "episodes", [{"episode_id": "bad", "reward": "not a number"}])
    assert [r["reward"] for r in read_rows(path)] == [1.0]
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_atomic_path_renames_only_on_success(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash")
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with atomic_path(target) as tmp:
        tmp.write_text("whole")
    assert target.read_text() == "whole"


def test_resume_needs_the_same_settings_and_schema_version(tmp_path):
    from gymflow.rollout.agenttraj import is_current, write_episodes

    write_episodes(tmp_path, "maze", [make_episode(0, 1.0)], INFO, {"gymflow.config_hash": "h"})
    assert is_current(tmp_path, "maze", "h") and not is_current(tmp_path, "maze", "other")
    path = table_path(tmp_path, "maze", "turns")
    table = pq.read_table(path)
    old = table.replace_schema_metadata({**table.schema.metadata, VERSION_KEY: b"1"})
    pq.write_table(old, path)  # a file from before the episode-id change
    assert not is_current(tmp_path, "maze", "h")
