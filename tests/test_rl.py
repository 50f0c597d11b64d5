"""The RL loop on a real environment with a tiny model: collection (early stop, turn limits), the stored
episodes and their advantages, the tokens the learner trains on, and resuming an interrupted run."""

import dataclasses
import itertools

import pytest
import torch
from transformers import AutoModelForCausalLM

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig, RLParams, RolloutParams
from gymflow.envs import make_env
from gymflow.envs.instructions import build_splits
from gymflow.envs.maze import Maze
from gymflow.models.build import build_model
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout.engine import EarlyStop, SamplingConfig, episode_turns, rollout
from gymflow.rollout.expert import run_expert
from gymflow.store.db import connect
from gymflow.train import rl as rl_loop
from gymflow.train.rl import token_episodes, train_rl

TASKS = build_splits(Maze, 6, 0, seed=0)["train"]
PLAY = RolloutParams(max_new_tokens=12, max_length=1024, batch_size=16)


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    """A tiny random agent saved like a stage's output: (its directory, its chat format)."""
    env = make_env("maze")
    texts = [m.text for t in TASKS for m in run_expert(env, t).messages]
    tokenizer = train_tokenizer(texts * 3, 400)
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, layers=1, heads=2, kv_heads=2, max_length=1024)
    folder = tmp_path_factory.mktemp("start")
    build_model(cfg, tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder), ChatFormat(tokenizer)


def _params(**kw) -> RLParams:
    return RLParams(tasks={"maze": 3}, samples=2, iterations=2, lr=1e-3, **kw)


def test_early_stop_cancels_stragglers_once_the_fraction_and_per_task_minimum_are_in(start, monkeypatch):
    folder, fmt = start
    step, calls = Maze._step, itertools.count()

    def ends_sometimes(self, action):  # episodes end at different turns: every third step ends one
        out = step(self, action)
        return dataclasses.replace(out, done=out.done or next(calls) % 3 == 0)

    monkeypatch.setattr(Maze, "_step", ends_sometimes)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    jobs = [(t, k) for t in TASKS[:3] for k in range(4)]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12, batch_size=12)
    everything = rollout(model, fmt, jobs, sampling, horizon=3, generator=torch.Generator().manual_seed(0))
    stop = EarlyStop(fraction=0.5, min_per_task=2)
    some = rollout(
        model, fmt, jobs, sampling, horizon=3, generator=torch.Generator().manual_seed(0), early_stop=stop
    )
    assert len(everything) == 12 and 6 <= len(some) < 12
    per_task = {t.task_id: sum(ep.task.task_id == t.task_id for ep in some) for t in TASKS[:3]}
    assert min(per_task.values()) >= 2
    assert stop.reached(jobs, some) and not stop.reached(jobs, some[:5])


def test_learner_sequences_are_the_sampled_ids_grouped_by_task(start):
    folder, fmt = start
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    jobs = [(t, k) for t in TASKS[:2] for k in range(2)]
    episodes = rollout(
        model, fmt, jobs, SamplingConfig(max_new_tokens=12), horizon=2, generator=torch.Generator()
    )
    rollouts = token_episodes(episodes, fmt)
    assert [r.group for r in rollouts] == [0, 0, 1, 1]
    for ep, r in zip(episodes, rollouts, strict=True):
        sampled = [i for m in ep.messages if m.role == "assistant" for i in m.token_ids]
        assert [i for i, t in zip(r.ids, r.turns, strict=True) if t] == sampled
        assert r.ids == episode_turns(ep.messages, fmt)[0]


def test_training_writes_each_iteration_and_a_turn_limit_schedule_applies(start, tmp_path):
    folder, _ = start
    rl = _params(horizon=[{"turns": 1, "iterations": 1}, {"turns": 3}], switches={"min_abs_advantage": 0})
    summary = train_rl(
        folder, tmp_path / "model", {"maze": TASKS}, rl, PLAY, tmp_path / "rollouts", tmp_path / "rl.csv"
    )
    assert summary["iterations"] == 2 and summary["episodes"] == 12
    db = connect(tmp_path / "rollouts")
    rows = db.execute(
        "select iteration, max(turns), max(horizon), count(*) from episodes group by 1 order by 1"
    ).fetchall()
    assert rows == [(1, 1, 1, 6), (2, rows[1][1], 3, 6)] and rows[1][1] <= 3
    assert db.execute("select distinct stage from episodes").fetchall() == [("rl",)]
    # with no filter, every reply carries the advantage it was weighted with, and nothing else does
    counts = db.execute("select role, count(*), count(advantage) from turns group by 1 order by 1").fetchall()
    assert [(role, n == with_adv) for role, n, with_adv in counts if role == "assistant"] == [
        ("assistant", True)
    ]
    assert all(with_adv == 0 for role, _, with_adv in counts if role != "assistant")
    assert (tmp_path / "model" / "config.json").exists()
    header = (tmp_path / "rl.csv").read_text().splitlines()[0].split(",")
    for column in (
        "reward",
        "success",
        "clip_fraction",
        "kl",
        "entropy",
        "grad_norm",
        "filtered",
    ):
        assert column in header
    # wall-clock figures go to the summary (the metrics), not the curve: a rerun writes the same curve
    assert not {"train_tokens_per_s", "rollout_s", "update_s"} & set(header)
    assert summary["train_tokens_per_s"] > 0 and summary["wall_seconds"] > 0


@pytest.mark.parametrize(
    "algorithm", ["loop", "ppo"]
)  # ppo: a value head, its warm-up and its optimizer group
def test_an_interrupted_run_resumes_at_the_next_iteration_with_the_same_result(
    start, tmp_path, monkeypatch, algorithm
):
    folder, _ = start
    rl = _params(horizon=[{"turns": 3}], warmup=20, algorithm=algorithm)  # the warm-up spans the interruption

    def run(out):
        return train_rl(folder, out / "model", {"maze": TASKS}, rl, PLAY, out / "rollouts", out / "rl.csv")

    run(tmp_path / "straight")
    calls = []
    real = rl_loop.run_iteration

    def interrupted(*args, **kw):
        calls.append(args[6])
        if args[6] == 2 and len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(rl_loop, "run_iteration", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed")
    run(tmp_path / "resumed")
    assert calls == [1, 2, 2]  # iteration 1 was not played again
    straight = AutoModelForCausalLM.from_pretrained(tmp_path / "straight" / "model").state_dict()
    resumed = AutoModelForCausalLM.from_pretrained(tmp_path / "resumed" / "model").state_dict()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    assert not (tmp_path / "resumed" / "model.checkpoints").exists()


def test_a_checkpoint_of_the_older_learner_with_two_optimizers_starts_afresh(start, tmp_path):
    from gymflow.train.pg import LearnerConfig, PolicyGradient
    from gymflow.train.presets import switches

    learner = PolicyGradient(
        AutoModelForCausalLM.from_pretrained(start[0]),
        LearnerConfig(switches=switches(_params(algorithm="ppo")), lr=1e-3),
    )
    path = tmp_path / "run" / "state.pt"
    path.parent.mkdir()
    torch.save({"rows": [], "value_optimizer": {}}, path)  # no iteration: its rollouts are whole
    assert rl_loop._restore(path, learner, tmp_path / "rollouts") == [] and not path.parent.exists()
