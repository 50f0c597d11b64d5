"""The rollout engine: the sequence the cache saw is the sequence a learner rebuilds from the records."""

import itertools
import os
import threading
import time

import pytest
import torch

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig
from gymflow.envs import make_env
from gymflow.envs.instructions import build_splits
from gymflow.envs.maze import Maze
from gymflow.models.build import build_model
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout.engine import SamplingConfig, each, episode_ids_and_mask, rollout
from gymflow.rollout.expert import run_expert

TASKS = build_splits(Maze, 6, 0, seed=0)["train"]


@pytest.fixture(scope="module")
def fmt():
    env = make_env("maze")
    texts = [m.text for t in TASKS for m in run_expert(env, t).messages]
    return ChatFormat(train_tokenizer(texts * 3, 400))


@pytest.fixture(scope="module")
def model(fmt):
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, layers=2, heads=4, kv_heads=2, max_length=1024)
    return build_model(cfg, fmt.tokenizer).eval()


def test_format_matches_the_chat_template_for_canonical_replies(fmt):
    episode = run_expert(make_env("maze"), TASKS[0])
    for m in episode.messages:
        if m.role == "assistant":
            m.token_ids = fmt.encode(m.text + fmt.tokenizer.eos_token)
    ids, mask = episode_ids_and_mask(episode.messages, fmt)
    chat = [{"role": m.role, "content": m.text} for m in episode.messages[:-1]]  # no reply after the last obs
    ref = fmt.tokenizer.apply_chat_template(chat, tokenize=False)
    assert fmt.tokenizer.decode(ids) == ref.removesuffix(fmt.after_reply)
    assert [i for i, m in zip(ids, mask, strict=True) if m] == [
        i for m in episode.messages if m.role == "assistant" for i in m.token_ids
    ]


def test_stored_logprobs_equal_a_full_recompute_of_the_rebuilt_sequence(model, fmt):
    gen = torch.Generator().manual_seed(0)
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=10, batch_size=4)
    episodes = rollout(model, fmt, [(t, 0) for t in TASKS], cfg, horizon=3, generator=gen)
    assert [e.task.task_id for e in episodes] == [t.task_id for t in TASKS]
    for ep in episodes:
        ids, mask = episode_ids_and_mask(ep.messages, fmt)
        assert ep.tokens == len(ids) and sum(mask) > 10  # several replies, all counted
        with torch.no_grad():
            logp = model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)
        recomputed = [float(logp[p - 1, ids[p]]) for p, m in enumerate(mask) if m]
        stored = [x for m in ep.messages if m.role == "assistant" for x in m.logprobs]
        assert stored == pytest.approx(recomputed, abs=1e-4)


def test_unparsable_replies_get_the_environments_answer_until_the_turn_limit(model, fmt):
    cfg = SamplingConfig(temperature=0, max_new_tokens=6, batch_size=8)
    episodes = rollout(model, fmt, [(t, 0) for t in TASKS[:3]], cfg, horizon=2)
    unparsable = 0
    for ep in episodes:
        replies = [m for m in ep.messages if m.role == "assistant"]
        assert len(replies) == ep.turns == 2 and ep.end_reason == "turn_limit" and not ep.success
        for reply, answer in itertools.pairwise(ep.messages[2:]):
            if reply.role == "assistant" and reply.action is None:
                unparsable += 1
                assert answer.role == "user" and answer.text.startswith("Invalid action")  # maze's own answer
    assert unparsable > 0  # an untrained model writes no `Action:` line in 6 tokens


def test_batched_equals_one_at_a_time_when_greedy(model, fmt):
    cfg = SamplingConfig(temperature=0, max_new_tokens=8, batch_size=6)
    jobs = [(t, 0) for t in TASKS]
    together = rollout(model, fmt, jobs, cfg, horizon=3)
    alone = rollout(
        model, fmt, jobs, SamplingConfig(temperature=0, max_new_tokens=8, batch_size=1), horizon=3
    )
    assert [[m.token_ids for m in e.messages] for e in together] == [
        [m.token_ids for m in e.messages] for e in alone
    ]


def test_episodes_that_end_at_different_turns_leave_the_others_unchanged(model, fmt):
    wordle = build_splits(type(make_env("wordle")), 3, 0, seed=0)["train"]
    jobs = [(t, 0) for t in [TASKS[0], wordle[0], TASKS[1], wordle[1]]]  # wordle's turn limit is shorter
    cfg = SamplingConfig(temperature=0, max_new_tokens=8, batch_size=4)
    together = rollout(model, fmt, jobs, cfg)
    alone = rollout(model, fmt, jobs, SamplingConfig(temperature=0, max_new_tokens=8, batch_size=1))
    assert len({e.turns for e in together}) > 1  # the batch really shrank mid-way
    for a, b in zip(together, alone, strict=True):
        assert [m.token_ids for m in a.messages] == [m.token_ids for m in b.messages]
        logprobs = [lp for m in a.messages for lp in m.logprobs]
        assert logprobs == pytest.approx([lp for m in b.messages for lp in m.logprobs], abs=1e-4)


def test_an_episode_that_would_outgrow_the_context_ends_with_length_limit(model, fmt):
    prompt = len(fmt.prompt(Maze.spec.system_prompt, make_env("maze").reset(TASKS[0])))
    cfg = SamplingConfig(temperature=0, max_new_tokens=8, max_length=prompt + 20, batch_size=2)
    (ep,) = rollout(model, fmt, [(TASKS[0], 0)], cfg, horizon=10)
    assert ep.end_reason == "length_limit" and ep.turns == 1


def test_environments_are_reused_across_batches_and_closed_at_the_end(model, fmt):
    made = []

    def counting_make_env(name):
        env = make_env(name)
        made.append(env)
        closed = env.close
        env.close = lambda: (setattr(env, "was_closed", True), closed())
        return env

    cfg = SamplingConfig(max_new_tokens=4, batch_size=2)
    episodes = rollout(model, fmt, [(t, 0) for t in TASKS], cfg, 2, make=counting_make_env)
    assert len(episodes) == len(TASKS) and len(made) == 2  # a batch's worth, not one per episode
    assert all(getattr(env, "was_closed", False) for env in made)


class WaitingMaze(Maze):
    """A maze whose resets and steps wait, as one in a sandbox or on a server does, and note their thread."""

    waits_on_process = True
    threads: set[int] = set()

    def reset(self, task):
        time.sleep(0.01)
        self.threads.add(threading.get_ident())
        return super().reset(task)

    def step(self, action):
        time.sleep(0.01)
        self.threads.add(threading.get_ident())
        return super().step(action)


two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one thread per core: needs two")


@two_cores
def test_environments_that_wait_are_stepped_at_once_and_play_the_same_episodes(model, fmt):
    cfg = SamplingConfig(temperature=0, max_new_tokens=8, batch_size=6)
    jobs = [(t, 0) for t in TASKS]
    plain = rollout(model, fmt, jobs, cfg, horizon=3)
    WaitingMaze.threads = set()
    waiting = rollout(model, fmt, jobs, cfg, horizon=3, make=lambda name: WaitingMaze())
    assert len(WaitingMaze.threads) > 1  # resets and steps ran on the engine's threads
    assert threading.get_ident() not in WaitingMaze.threads
    assert [e.messages for e in waiting] == [e.messages for e in plain]  # logprobs too, exactly
    assert [(e.reward, e.turns, e.end_reason) for e in waiting] == [
        (e.reward, e.turns, e.end_reason) for e in plain
    ]


@two_cores
def test_each_overlaps_waiting_environments_keeps_order_and_steps_the_others_in_turn():
    meet = threading.Barrier(2, timeout=10)  # passes only if both calls are in flight at once
    waiting = [(WaitingMaze(), i) for i in range(2)]
    assert each(lambda item: (meet.wait(), item[1])[1], waiting) == [0, 1]
    mixed = [(WaitingMaze(), 0), (Maze(), 1), (WaitingMaze(), 2)]
    assert each(lambda item: threading.get_ident(), mixed) == [threading.get_ident()] * 3
