"""Data-parallel training under `accelerate launch`: two CPU processes (gloo, on 127.0.0.1) against one process on
the same global batches. SFT's loss curve and weights, the policy-gradient update's weights and statistics, and
two RL iterations (the first process plays and writes, both train) must match; and how each process's share of
a batch is weighted, worked out by hand and checked in one process.

This module is also the script the test launches: `accelerate launch --multi_gpu --num_processes 2
tests/test_distributed_train.py DIR` runs `_sft`, `_pg` and `_rl` in each process, as the test runs them in its own.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from gymflow.config import ModelConfig, RLParams, RolloutParams, SFTParams
from gymflow.envs import make_env
from gymflow.envs.instructions import build_splits
from gymflow.envs.maze import Maze
from gymflow.models.build import build_initial, build_model, load_tokenizer
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import RunInfo
from gymflow.store.db import connect
from gymflow.train.pg import LearnerConfig, PolicyGradient, TokenEpisode
from gymflow.train.prefix import prefix_chunks
from gymflow.train.presets import PRESETS, PGSwitches
from gymflow.train.rl import train_rl
from gymflow.train.sft import conversations, mixture, process_share, train_sft

TASKS = build_splits(Maze, 24, 0, seed=0)["train"]
TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "layers": 1,
    "heads": 2,
    "kv_heads": 2,
    "max_length": 1024,
}
# 21 episodes in global batches of 4: the last batch has one row, so the second process's share of it is empty
SFT = SFTParams(envs={"maze": 1}, lr=1e-2, batch_size=4, log_every=1, bf16=False)
SFT_EPISODES = 21
# Six episodes of three tasks, 3 to 8 ids long. Forward passes of at most 10 padded ids (`MAX_TOKENS`) hold one or
# two of them: LOOP's six mini-batches of two take one pass (the second process has none) or two (one each).
SHAPES = [
    ([5, 6, 7, 10, 11, 8, 9, 12], [0, 0, 0, 1, 1, 0, 0, 2], 1.0, 0),
    ([5, 6, 7, 13], [0, 0, 0, 1], 0.0, 0),
    ([5, 9, 14, 15, 16], [0, 0, 1, 1, 1], 0.0, 1),
    ([5, 9, 17, 8, 18], [0, 0, 1, 0, 2], 0.6, 1),
    ([5, 6, 7, 10, 13, 12], [0, 0, 0, 1, 1, 1], 0.3, 2),
    ([5, 6, 11], [0, 0, 1], 0.9, 2),
]
MAX_TOKENS = 10
PRESETS_RUN = ("loop", "ppo")  # LOOP: 2 epochs x 3 mini-batches; PPO: a value head and a KL term besides
# PPO: the tiny agent earns no reward, and a value head still gives advantages (reward - value) to learn from
RL = RLParams(
    tasks={"maze": 3},
    samples=2,
    iterations=2,
    lr=1e-3,
    max_tokens=300,
    horizon=[{"turns": 3}],
    algorithm="ppo",
)
PLAY = RolloutParams(max_new_tokens=12, max_length=1024, batch_size=16)


# ---- the work, the same in one process and in each of two -------------------------------------------------------


def _sft(root: Path, out: Path) -> None:
    data = mixture(root / "data", SFT.envs)[:SFT_EPISODES]
    train_sft(str(root / "init"), out / "sft", data, SFT, out / "sft.csv")


def _pg(root: Path, out: Path, rank: int) -> None:
    """Each preset's update at lr 0 (the weights stay, the last step's reduced and clipped gradient is left in
    `.grad`) and at lr 1e-2."""
    pad = load_tokenizer(str(root / "start")).pad_token_id
    for preset in PRESETS_RUN:
        saved = {}
        for lr in (0.0, 1e-2):
            torch.manual_seed(0)  # the value head's initial weights
            model = AutoModelForCausalLM.from_pretrained(root / "start")
            switches = PGSwitches.model_validate(
                {**PRESETS[preset], "min_abs_advantage": 0, "value_warmup": 2}
            )
            config = LearnerConfig(
                switches=switches, lr=lr, pad_id=pad, max_tokens=MAX_TOKENS, temperature=0.7
            )
            learner = PolicyGradient(model, config)
            stats = learner.step(learner.prepare([TokenEpisode(*shape) for shape in SHAPES]))
            value = learner.value.head.state_dict() if learner.value is not None else {}
            grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
            saved[lr] = {"model": model.state_dict(), "value": value, "grads": grads, "stats": stats}
        if rank == 0:
            torch.save(saved, out / f"pg_{preset}.pt")


def _rl(root: Path, out: Path) -> None:
    torch.manual_seed(0)  # the value head's initial weights
    rl = out / "rl"
    train_rl(str(root / "start"), rl / "model", {"maze": TASKS[:6]}, RL, PLAY, rl / "rollouts", rl / "rl.csv")


def _work(root: Path, out: Path, rank: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    _sft(root, out)
    _pg(root, out, rank)
    _rl(root, out)


# ---- fixtures ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Inputs both runs read: AgentTraj episodes and a tiny initial model (SFT), a tiny agent (RL)."""
    path = tmp_path_factory.mktemp("distributed")
    env = make_env("maze")
    info = RunInfo(run="agenttraj", stage="trajectories", iteration=0, policy="expert")
    write_episodes(path / "data" / "rollouts", "maze", [run_expert(env, t) for t in TASKS], info)
    texts = [m["content"] for c in conversations(path / "data", ["maze"]) for m in c["messages"]]
    build_initial(texts, ModelConfig(vocab_size=400, **TINY), path / "init")
    tokenizer = train_tokenizer(texts * 3, 400)
    torch.manual_seed(0)
    build_model(ModelConfig(**TINY), tokenizer).save_pretrained(path / "start")
    tokenizer.save_pretrained(path / "start")
    return path


@pytest.fixture(scope="module")
def one(root) -> Path:
    """The work in this process (torch.distributed not initialised): the reference, on the CPU as the others."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda, "is_available", lambda: False)
        _work(root, root / "one", rank=0)
    return root / "one"


@pytest.fixture(scope="module")
def two(root) -> Path:
    """The work in two CPU processes started by `accelerate launch`, talking over 127.0.0.1 only."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    loopback = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"}
    env = os.environ | loopback | {"CUDA_VISIBLE_DEVICES": ""}  # CPU processes, also on a machine with GPUs
    command = [
        *(sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"),
        *("--num_machines", "1", "--main_process_ip", "127.0.0.1", "--main_process_port", str(port)),
        *("--mixed_precision", "no", "--dynamo_backend", "no", __file__, str(root)),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return root / "two"


@pytest.fixture(scope="module")
def cores(root) -> Path:
    """SFT as the stage runs it on a CPU with `sft.processes` 2 (`gymflow.train.cores.over_cores`): this module run
    as a script, which starts its second process itself."""
    env = os.environ | {"CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, __file__, str(root), "--cores"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return root / "cores"


# ---- SFT --------------------------------------------------------------------------------------------------------


def _curve(path: Path) -> list[tuple[int, float]]:
    rows = [line.split(",") for line in path.read_text().splitlines()[1:]]
    return [(int(step), float(loss)) for step, loss, _ in rows]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(folder).state_dict()


@pytest.mark.slow  # `accelerate launch`, or the stage's own second process: two training processes
@pytest.mark.parametrize("launch", ["two", "cores"])
def test_two_process_sft_has_one_process_loss_curve_and_weights(one, launch, request):
    two = request.getfixturevalue(launch)
    if launch == "cores":
        assert json.loads((two / "world.json").read_text()) == 2
    curve_one, curve_two = _curve(one / "sft.csv"), _curve(two / "sft.csv")
    assert [s for s, _ in curve_one] == [1, 2, 3, 4, 5, 6]  # ceil(21 / 4) steps of the global batch
    assert [s for s, _ in curve_two] == [1, 2, 3, 4, 5, 6]
    # the Trainer logs losses rounded to 4 decimals
    assert [loss for _, loss in curve_two] == pytest.approx([loss for _, loss in curve_one], abs=2e-4)
    assert curve_one[-1][1] < curve_one[0][1] - 0.1  # it trained: the curves are not flat by chance
    before, w_one, w_two = _weights(one.parent / "init"), _weights(one / "sft"), _weights(two / "sft")
    assert any(not torch.equal(before[k], w_one[k]) for k in w_one)
    for name in w_one:  # 1e-4: see the policy-gradient test on Adam and float noise
        assert torch.allclose(w_one[name], w_two[name], atol=1e-4, rtol=0), name
    assert not (two / "sft.checkpoints").exists()  # the first process removed them once the model was saved


def test_a_share_of_a_batch_is_every_nth_row_weighted_by_the_number_of_processes():
    """Three rows with 3, 1 and 2 target tokens and token-loss sums 3, 2 and 1: the global mean is 6 / 6 = 1.
    Each process's loss is its rows' sum over the global 6 tokens times 2 (DDP averages over 2 processes):
    process 0 (rows 0 and 2) (3 + 1) / 6 * 2 = 4/3, process 1 (row 1) 2 / 6 * 2 = 2/3; their mean is 1. The mean of
    the processes' own token means, (4/5 + 2/1) / 2 = 1.4, is not."""
    batch = {
        "input_ids": torch.tensor([[1], [2], [3]]),
        "labels": torch.tensor([[4], [5], [6]]),
        "note": "kept",
    }
    sums, tokens = torch.tensor([3.0, 2.0, 1.0]), torch.tensor([3.0, 1.0, 2.0])
    losses, own_means = [], []
    for rank in (0, 1):
        share, weight = process_share(batch, rank, 2)
        rows = share["input_ids"][:, 0] - 1
        assert share["note"] == "kept" and torch.equal(share["labels"][:, 0], rows + 4)
        losses.append(float(sums[rows].sum() / tokens.sum() * weight))
        own_means.append(float(sums[rows].sum() / tokens[rows].sum()))
    assert losses == pytest.approx([4 / 3, 2 / 3]) and sum(losses) / 2 == pytest.approx(1.0)
    assert sum(own_means) / 2 == pytest.approx(1.4)
    # a last batch of one row: the second process trains row 0 at weight 0, and still joins the all-reduce
    short = {"input_ids": torch.tensor([[7]])}
    assert process_share(short, 0, 2)[1] == 2.0 and process_share(short, 1, 2)[1] == 0.0
    assert torch.equal(process_share(short, 1, 2)[0]["input_ids"], short["input_ids"])


def test_the_shares_weighted_losses_give_the_global_batch_gradient(root):
    """On the tiny model and a real batch of unequal lengths: the processes' weighted losses average to the batch's
    token mean, and their gradients (DDP averages them) to its gradient; plain per-process means do not."""
    tokenizer = load_tokenizer(str(root / "init"))
    model = AutoModelForCausalLM.from_pretrained(root / "init")
    texts = [c["messages"][2]["content"] for c in conversations(root / "data", ["maze"])[:3]]
    rows = [tokenizer(t)["input_ids"][: 4 + 3 * i] for i, t in enumerate(texts)]  # 4, 7 and 10 ids
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    count = (batch["labels"][:, 1:] != -100).sum()

    def loss_and_grad(inputs, weight=1.0, items=count):
        model.zero_grad()
        loss = model(**inputs, num_items_in_batch=items).loss * weight
        loss.backward()
        return float(loss.detach()), torch.cat([p.grad.flatten() for p in model.parameters()])

    whole, grad = loss_and_grad(batch)
    shares = [loss_and_grad(*process_share(batch, rank, 2)) for rank in (0, 1)]
    assert sum(s[0] for s in shares) / 2 == pytest.approx(whole, rel=1e-5)
    assert torch.allclose((shares[0][1] + shares[1][1]) / 2, grad, atol=1e-6)
    means = [loss_and_grad(process_share(batch, rank, 2)[0], items=None)[0] for rank in (0, 1)]
    assert abs(sum(means) / 2 - whole) > 1e-3


# ---- the policy-gradient update ---------------------------------------------------------------------------------


@pytest.mark.slow  # `accelerate launch`: two training processes
@pytest.mark.parametrize("preset", PRESETS_RUN)
def test_two_process_policy_gradient_update_gives_one_process_gradients_and_weights(one, two, preset):
    a, b = torch.load(one / f"pg_{preset}.pt"), torch.load(two / f"pg_{preset}.pt")
    for lr in (0.0, 1e-2):
        assert a[lr]["stats"]["steps"] == b[lr]["stats"]["steps"] == 6  # 2 epochs of 3 mini-batches of 2
        keys = ("clip_fraction", "kl", "entropy", "grad_norm") + (
            ("value_loss", "kl_ref") if a[lr]["value"] else ()
        )
        for key in keys:  # every step's sums over both processes' passes
            assert b[lr]["stats"][key] == pytest.approx(a[lr]["stats"][key], rel=1e-5, abs=1e-7), (lr, key)
    # at lr 0 every step sees the same weights: the last step's gradient, summed over processes and clipped
    assert a[0.0]["grads"].keys() == b[0.0]["grads"].keys() and len(a[0.0]["grads"]) > 10
    for name, grad in a[0.0]["grads"].items():
        assert torch.allclose(grad, b[0.0]["grads"][name], atol=1e-7, rtol=1e-4), name
    # at lr 1e-2, the weights after the update. The keys' bias has a gradient of float noise only (a softmax
    # does not see a shift common to all keys), which Adam scales up to lr-sized steps: hence 1e-4.
    start = _weights(one.parent / "start")
    after_one, after_two = a[1e-2]["model"], b[1e-2]["model"]
    assert all((after_one[k] - start[k]).abs().max() > 1e-3 for k in after_one)  # every weight moved
    for name in after_one:
        assert torch.allclose(after_one[name], after_two[name], atol=1e-4, rtol=0), name
    for name, weight in a[1e-2]["value"].items():
        assert torch.allclose(weight, b[1e-2]["value"][name], atol=1e-5, rtol=0), name


def test_each_process_passes_sum_to_the_one_process_gradient(root):
    """In one process, as processes 0 and 1 of 2 would. A mini-batch of episodes 0-4 (8, 4, 5, 5 and 6 ids) in
    passes of at most 10 padded ids, shortest first: [1, 2], [3], [4], [0]. Process 0 takes passes 1 and 3
    (episodes 1, 2, 4), process 1 passes 2 and 4 (episodes 3, 0). Each pass's loss is weighted by its episodes
    over the mini-batch's 5, so the two gradients sum to the mini-batch's. Averaging the processes' own means
    (their sums over 3 and over 2 episodes) would weight process 1's episodes 3/2 times as much: not the same."""
    switches = PGSwitches.model_validate({**PRESETS["loop"], "min_abs_advantage": 0})
    config = LearnerConfig(switches=switches, lr=0.0, pad_id=0, max_tokens=MAX_TOKENS)
    learner = PolicyGradient(AutoModelForCausalLM.from_pretrained(root / "start"), config)
    batch = learner.prepare([TokenEpisode(*shape) for shape in SHAPES])
    units, part = learner.units(batch), [0, 1, 2, 3, 4]
    # nothing shared (under 16 ids): the passes length_chunks cuts
    assert prefix_chunks(part, batch.episodes, MAX_TOKENS) == [[1, 2], [3], [4], [0]]

    def gradient(rank: int, processes: int) -> torch.Tensor:
        learner.rank, learner.processes = rank, processes
        learner.model.zero_grad()
        learner.backward(batch, part, units)
        return torch.cat([p.grad.flatten() for p in learner.params if p.grad is not None])

    whole, first, second = gradient(0, 1), gradient(0, 2), gradient(1, 2)
    assert torch.allclose(first + second, whole, atol=1e-7)
    assert not torch.allclose(first, whole, atol=1e-4) and not torch.allclose(second, whole, atol=1e-4)
    mean_of_means = (first * 5 / 3 + second * 5 / 2) / 2
    assert not torch.allclose(mean_of_means, whole, atol=1e-4)


# ---- RL iterations ----------------------------------------------------------------------------------------------


@pytest.mark.slow  # `accelerate launch`: two training processes
def test_two_process_rl_plays_once_and_trains_as_one_process(one, two):
    a, b = one / "rl", two / "rl"
    # the first process alone plays, from the same weights: the same episodes (iteration 2's are sampled from
    # weights equal within float error). Log-probabilities and advantages may differ in the last bits (one
    # thread against two).
    assert (a / "rollouts" / "it001.episodes.parquet").read_bytes() == (
        b / "rollouts" / "it001.episodes.parquet"
    ).read_bytes()
    query = """select iteration, episode_id, turn, role, text, token_ids, advantage, logprobs
               from turns join episodes using (episode_id) order by 1, 2, 3"""
    turns_one, turns_two = (connect(x / "rollouts").execute(query).fetchall() for x in (a, b))
    assert {t[0] for t in turns_one} == {1, 2} and len(turns_one) == len(turns_two)
    for t1, t2 in zip(turns_one, turns_two, strict=True):
        assert t1[:6] == t2[:6]
        assert t1[6] == t2[6] or t1[6] == pytest.approx(t2[6], abs=1e-5)
        assert t1[7] == t2[7] or t1[7] == pytest.approx(t2[7], abs=1e-5)
    assert sorted(p.name for p in (b / "rollouts").iterdir()) == sorted(
        p.name for p in (a / "rollouts").iterdir()
    )
    start, w_one, w_two = _weights(one.parent / "start"), _weights(a / "model"), _weights(b / "model")
    assert all((w_one[k] - start[k]).abs().max() > 1e-4 for k in w_one)  # the update moved every weight
    for name in w_one:
        assert torch.allclose(w_one[name], w_two[name], atol=1e-4, rtol=0), name
    rows_one = [line.split(",") for line in (a / "rl.csv").read_text().splitlines()]
    rows_two = [line.split(",") for line in (b / "rl.csv").read_text().splitlines()]
    assert rows_one[0] == rows_two[0] and len(rows_two) == 1 + RL.iterations
    for r1, r2 in zip(rows_one[1:], rows_two[1:], strict=True):
        assert [float(x or 0) for x in r2] == pytest.approx([float(x or 0) for x in r1], rel=1e-4, abs=1e-5)
    assert json.loads((two / "done.json").read_text()) == {"ranks": [0, 1]}  # both processes ran to the end


def test_indivisible_global_batch_is_a_user_error(monkeypatch):
    from gymflow.errors import UserError
    from gymflow.train import sft

    monkeypatch.setattr(sft.SFTConfig, "world_size", property(lambda self: 3))
    with pytest.raises(UserError, match="sft.batch_size 4 does not divide among 3 processes"):
        sft.sft_args(SFT, Path("out"))


if __name__ == "__main__" and sys.argv[2:] == ["--cores"]:  # SFT over two cores, as stages.sft runs it
    from gymflow.train.cores import over_cores

    (Path(sys.argv[1]) / "cores").mkdir(exist_ok=True)
    with over_cores(2, [sys.executable, *sys.argv]):
        _sft(Path(sys.argv[1]), Path(sys.argv[1]) / "cores")
        if os.environ["RANK"] == "0":  # how many processes trained
            world = torch.distributed.get_world_size()
            (Path(sys.argv[1]) / "cores" / "world.json").write_text(json.dumps(world))
elif __name__ == "__main__":  # one of the processes `accelerate launch` started
    from accelerate import PartialState

    state = PartialState(cpu=True)
    out = Path(sys.argv[1]) / "two"
    _work(Path(sys.argv[1]), out, state.process_index)
    ranks = [None] * state.num_processes
    torch.distributed.all_gather_object(ranks, state.process_index)
    if state.is_main_process:
        (out / "done.json").write_text(json.dumps({"ranks": ranks}))
    torch.distributed.destroy_process_group()
