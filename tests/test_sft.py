"""SFT: the data it reads, the tokens it trains on (assistant replies only), and that it learns."""

import csv
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig, SFTParams
from gymflow.envs import make_env
from gymflow.envs.instructions import build_splits
from gymflow.envs.maze import Maze
from gymflow.models.build import build_initial
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.engine import episode_ids_and_mask
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import RunInfo
from gymflow.train.sft import causal_mask, conversations, mixture, sft_args, train_sft, use_bf16

TASKS = build_splits(Maze, 24, 0, seed=0)["train"]
INFO = RunInfo(run="agenttraj", stage="trajectories", iteration=0, policy="expert")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("data")
    env = make_env("maze")
    write_episodes(path / "rollouts", "maze", [run_expert(env, t) for t in TASKS], INFO)
    return path


@pytest.fixture(scope="module")
def init_dir(tmp_path_factory, data_dir):
    path = tmp_path_factory.mktemp("init")
    texts = [m["content"] for c in conversations(data_dir, ["maze"]) for m in c["messages"]]
    cfg = ModelConfig(
        vocab_size=400, hidden_size=32, intermediate_size=64, layers=1, heads=2, kv_heads=2, max_length=1024
    )
    build_initial(texts, cfg, path)
    return path


def test_conversations_are_the_stored_episodes_without_the_last_observation(data_dir):
    convs = conversations(data_dir, ["maze"])
    assert len(convs) == len(TASKS)
    first = run_expert(make_env("maze"), TASKS[0]).messages
    by_instruction = {c["messages"][1]["content"]: c["messages"] for c in convs}
    msgs = by_instruction[first[1].text]
    assert [m["role"] for m in msgs] == [m.role for m in first[:-1]] and msgs[-1]["role"] == "assistant"
    assert [m["content"] for m in msgs] == [m.text for m in first[:-1]]
    assert conversations(data_dir, ["wordle"]) == [] and conversations(data_dir, ["maze"], "sft") == []


def test_trained_tokens_are_the_assistant_replies_exactly(tmp_path, data_dir, init_dir):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    tok = AutoTokenizer.from_pretrained(init_dir)
    convs = conversations(data_dir, ["maze"])[:3]
    args = SFTConfig(
        output_dir=str(tmp_path), assistant_only_loss=True, max_length=1024, use_cpu=True, report_to=[]
    )
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(init_dir),
        args=args,
        train_dataset=Dataset.from_list(convs),
        processing_class=tok,
    )
    fmt = ChatFormat(tok)
    env = make_env("maze")
    for row, conv in zip(trainer.train_dataset, convs, strict=True):
        episode = run_expert(env, next(t for t in TASKS if t.instruction in conv["messages"][1]["content"]))
        for m in episode.messages:
            m.token_ids = fmt.encode(m.text + tok.eos_token) if m.role == "assistant" else []
        ids, mask = episode_ids_and_mask(episode.messages, fmt)
        # TRL's sequence ends with the template's text after the last reply, outside the mask
        trained = [int(label != -100) for label in row["labels"]]
        assert row["input_ids"][: len(ids)] == ids and trained[: len(mask)] == mask
        assert not any(trained[len(mask) :])
        assert [label for label in row["labels"] if label != -100] == [
            i for i, m in zip(ids, mask, strict=True) if m
        ]


@pytest.mark.slow  # trains until the model learns
def test_a_short_run_learns_the_expert_replies_and_saves_a_model(tmp_path, data_dir, init_dir):
    cfg = SFTParams(envs={"maze": 6}, lr=1e-2, batch_size=4, log_every=2, bf16=False)
    data = mixture(data_dir, cfg.envs)
    assert len(data) == 6 * len(TASKS)
    metrics = train_sft(str(init_dir), tmp_path / "sft", data, cfg, tmp_path / "sft.csv")
    rows = list(csv.DictReader((tmp_path / "sft.csv").open()))
    losses = [float(r["loss"]) for r in rows]
    assert len(losses) >= 5 and losses[-1] < 0.5 * losses[0], losses
    assert metrics["episodes"] == len(data) and metrics["train_tokens_per_s"] > 0
    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "sft")
    before = AutoModelForCausalLM.from_pretrained(init_dir)
    assert not torch.equal(trained.model.embed_tokens.weight, before.model.embed_tokens.weight)
    assert not (tmp_path / "sft.checkpoints").exists()  # removed once the model is saved


@pytest.mark.parametrize("checkpointing", [False, True])
def test_activation_checkpointing_is_the_parameters_choice(tmp_path, data_dir, init_dir, checkpointing):
    from datasets import Dataset

    from gymflow.train.sft import AssistantLossTrainer

    cfg = SFTParams(envs={"maze": 1}, batch_size=4, bf16=False, activation_checkpointing=checkpointing)
    trainer = AssistantLossTrainer(
        model=AutoModelForCausalLM.from_pretrained(init_dir),
        args=sft_args(cfg, tmp_path),  # TRL's SFTConfig would checkpoint unless told otherwise
        train_dataset=Dataset.from_list(conversations(data_dir, ["maze"])[:4]),
        processing_class=AutoTokenizer.from_pretrained(init_dir),
    )
    trainer.train()
    assert trainer.model.is_gradient_checkpointing is checkpointing


def test_the_mixture_repeats_each_environment_by_its_passes(tmp_path, data_dir):
    env = make_env("wordle")
    wordle = build_splits(type(env), 3, 0, seed=0)["train"]
    write_episodes(tmp_path / "rollouts", "wordle", [run_expert(env, t) for t in wordle], INFO)
    write_episodes(tmp_path / "rollouts", "maze", [run_expert(make_env("maze"), t) for t in TASKS[:2]], INFO)
    data = mixture(tmp_path, {"maze": 3, "wordle": 1})
    firsts = [c["messages"][1]["content"] for c in data]
    assert len(data) == 3 * 2 + 3
    assert all(sum(t.instruction in first for first in firsts) == 3 for t in TASKS[:2])
    assert sum(c["messages"][0]["content"] == env.spec.system_prompt for c in data) == 3


def test_our_loss_is_trls_loss_on_the_same_batch(tmp_path, data_dir, init_dir):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from gymflow.train.sft import AssistantLossTrainer

    tok = AutoTokenizer.from_pretrained(init_dir)
    model = AutoModelForCausalLM.from_pretrained(init_dir)
    args = SFTConfig(
        output_dir=str(tmp_path), assistant_only_loss=True, max_length=1024, use_cpu=True, report_to=[]
    )
    data = Dataset.from_list(conversations(data_dir, ["maze"])[:4])
    losses = []
    for cls in (SFTTrainer, AssistantLossTrainer):
        trainer = cls(model=model, args=args, train_dataset=data, processing_class=tok)
        batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
        assert (batch["labels"] != -100).sum() < batch["attention_mask"].sum()  # some context is not trained
        assert (
            not batch["attention_mask"].all() and causal_mask(batch["attention_mask"]) is None
        )  # right-padded
        with torch.no_grad():
            losses.append(float(trainer.compute_loss(trainer.model, batch)))
    assert losses[0] == pytest.approx(losses[1], rel=1e-5) and losses[0] > 1.0


def test_the_lm_head_on_labelled_positions_gives_the_models_own_loss_and_gradients(
    tmp_path, data_dir, init_dir
):
    from datasets import Dataset
    from trl import SFTConfig

    from gymflow.train.sft import AssistantLossTrainer

    tok = AutoTokenizer.from_pretrained(init_dir)
    model = AutoModelForCausalLM.from_pretrained(init_dir)
    args = SFTConfig(
        output_dir=str(tmp_path), assistant_only_loss=True, max_length=1024, use_cpu=True, report_to=[]
    )
    data = Dataset.from_list(conversations(data_dir, ["maze"])[:4])
    trainer = AssistantLossTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    labelled = int((batch["labels"][:, 1:] != -100).sum())
    runs = []
    for loss_of in (
        lambda: trainer.compute_loss(trainer.model, batch),
        lambda: trainer.compute_loss(trainer.model, batch, num_items_in_batch=torch.tensor(2 * labelled)),
        lambda: model(input_ids=batch["input_ids"], labels=batch["labels"]).loss,
    ):
        model.zero_grad()
        loss = loss_of()
        loss.backward()
        runs.append((float(loss), [p.grad.clone() for p in model.parameters()]))
    (ours, grads), (halved, _), (theirs, expected) = runs
    assert ours == pytest.approx(theirs, rel=1e-5) and halved == pytest.approx(theirs / 2, rel=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads, expected, strict=True))
    assert not model.get_output_embeddings()._forward_pre_hooks  # the hook is gone


def test_repeated_rows_are_tokenized_once_and_trained_as_tokenized_in_the_mixtures_order(
    tmp_path, data_dir, init_dir, monkeypatch
):
    from datasets import Dataset

    from gymflow.train.sft import AssistantLossTrainer

    class Trained(Exception):
        pass

    def train(self, **_):
        raise Trained(self.train_dataset)

    convs = conversations(data_dir, ["maze"])[:3]
    system, user, reply = convs[0]["messages"][:3]
    long = {"role": "user", "content": user["content"] + " wall" * 2000}
    untrained = {"messages": [system, long, reply]}  # its reply lies past max_length: TRL drops the row
    data = [
        convs[1],
        convs[0],
        untrained,
        convs[1],
        convs[2],
        convs[0],
        untrained,
        convs[1],
    ]  # passes, shuffled
    monkeypatch.setattr(AssistantLossTrainer, "train", train)
    with pytest.raises(Trained) as stopped:
        train_sft(
            str(init_dir),
            tmp_path / "model",
            data,
            SFTParams(envs={"maze": 1}, max_length=1024, bf16=False),
            tmp_path / "curve.csv",
        )
    rows = stopped.value.args[0]
    tokenizer = AutoTokenizer.from_pretrained(init_dir)
    direct = AssistantLossTrainer(  # TRL's own preparation of every row of the mixture
        model=AutoModelForCausalLM.from_pretrained(init_dir),
        args=sft_args(SFTParams(envs={"maze": 1}, max_length=1024, bf16=False), tmp_path / "direct"),
        train_dataset=Dataset.from_list(data),
        processing_class=tokenizer,
    ).train_dataset
    assert rows.data.num_rows == 4 and len(rows) == len(direct) == 6  # 4 rows tokenized, 6 trained on
    assert rows.column_names == direct.column_names and "input_ids" in rows.column_names
    for column in rows.column_names:
        assert rows[column] == direct[column]
    assert rows["input_ids"][0] != rows["input_ids"][1] and rows["input_ids"][0] == rows["input_ids"][2]


def test_a_right_padded_batch_trains_the_same_without_its_mask(init_dir):
    model = AutoModelForCausalLM.from_pretrained(init_dir)
    ids = torch.randint(5, 300, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, 7:], mask[2, 10:] = 0, 0  # rows of 7, 12 and 10 tokens, padded on the right
    labels = ids.masked_fill(mask == 0, -100)
    grads = []
    for m in (mask, causal_mask(mask)):
        model.zero_grad()
        loss = model(input_ids=ids, attention_mask=m, labels=labels).loss
        loss.backward()
        grads.append((float(loss), [p.grad.clone() for p in model.parameters()]))
    assert grads[1][0] == pytest.approx(grads[0][0], rel=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads[0][1], grads[1][1], strict=True))
    left = mask.flip(1)  # left padding: real tokens would attend to the pads before them
    assert torch.equal(causal_mask(left), left) and causal_mask(torch.ones_like(ids)) is None


@pytest.mark.parametrize(
    ("avx512_bf16", "amx", "kernels", "expected"),
    [
        (False, False, "AVX512", False),
        (True, False, "AVX512", True),
        (False, True, "AVX512", True),
        (True, True, "AVX2", False),  # ATEN_CPU_CAPABILITY=avx2: PyTorch's kernels would emulate bf16
    ],
)
def test_auto_precision_is_bf16_only_where_the_cpu_computes_it(
    monkeypatch, avx512_bf16, amx, kernels, expected
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: kernels)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    assert use_bf16("auto") is expected
    assert use_bf16(True) is True and use_bf16(False) is False  # an explicit setting is obeyed
    assert sft_args(SFTParams(envs={"maze": 1}), Path("out")).bf16 is expected


def test_nothing_to_learn_saves_the_start_unchanged(tmp_path, init_dir):
    """AgentEvol unmerged with nothing kept (and its control, matched to 0 rows) learns from an empty set: the
    result is the start, weights equal, 0 episodes, an empty curve."""
    from gymflow.models.files import weights_hash

    out = tmp_path / "evol1"
    metrics = train_sft(str(init_dir), out, [], SFTParams(envs={"maze": 1}), tmp_path / "curve.csv")
    start = AutoModelForCausalLM.from_pretrained(init_dir)
    assert metrics["episodes"] == 0 and weights_hash(
        AutoModelForCausalLM.from_pretrained(out)
    ) == weights_hash(start)
    assert (tmp_path / "curve.csv").read_text().strip() == "step,loss,lr"


def test_regroup_fills_each_batch_with_one_keys_rows_in_the_order_they_come():
    from gymflow.train.shared_prompt import regroup

    keys = ["a", "b", "a", "a", "b", "b", "a", "c"]
    assert regroup(range(8), keys, 2) == [0, 2, 1, 4, 3, 6, 5, 7]  # a, b, a full batches; b and c left over
    assert regroup([3, 1, 0, 2], ["a"] * 4, 3) == [3, 1, 0, 2]  # one key: the order itself
    assert sorted(regroup([5, 0, 3, 1, 4, 2], keys, 3)) == list(range(6))


def test_shared_prefix_stops_before_the_state_of_the_first_target():
    from gymflow.train.shared_prompt import MIN_SHARED, shared_prefix

    ids = torch.arange(100).repeat(3, 1)
    ids[1, 40], ids[2, 60] = -1, -1  # row 1 differs from position 40
    labels = torch.full_like(ids, -100)
    labels[:, 70:90] = ids[:, 70:90]
    assert shared_prefix(ids, labels) == 40
    labels[2, 30] = 5  # a target at 30 is predicted from position 29: the prefix ends before it
    assert shared_prefix(ids, labels) == 29
    labels[0, MIN_SHARED] = 5
    assert shared_prefix(ids, labels) == 0  # too few ids to be worth a second pass
    long = torch.arange(800).repeat(2, 1)
    long[
        1, 40:
    ] = -1  # 40 shared ids of rows of 800: a second pass over the rows' 760 costs more than it saves
    late = torch.full_like(long, -100)
    late[:, 700:] = 5
    assert shared_prefix(long, late) == 0 and shared_prefix(long[:, :300], late[:, 500:]) == 40


def test_a_batchs_shared_prompt_run_once_gives_the_whole_rows_loss_and_gradients(
    tmp_path, data_dir, init_dir, monkeypatch
):
    from datasets import Dataset

    from gymflow.train import sft, shared_prompt

    tok = AutoTokenizer.from_pretrained(init_dir)
    model = AutoModelForCausalLM.from_pretrained(init_dir)
    args = sft_args(SFTParams(envs={"maze": 1}, max_length=1024, bf16=False), tmp_path / "out")
    data = Dataset.from_list(conversations(data_dir, ["maze"])[:4])
    trainer = sft.AssistantLossTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    assert not batch["attention_mask"].all()  # right-padded rows of several lengths
    prefix = shared_prompt.shared_prefix(batch["input_ids"], batch["labels"])
    assert prefix > 32  # the maze system prompt
    calls = []
    monkeypatch.setattr(
        sft, "prefix_then_rows", lambda *a: calls.append(a[-1]) or shared_prompt.prefix_then_rows(*a)
    )
    runs = []
    for share in (True, False):
        model.zero_grad()
        loss, _ = sft.assistant_loss(model, model, batch, share=share)
        loss.backward()
        runs.append((loss.item(), [p.grad.clone() for p in model.parameters()]))
    assert calls == [prefix]  # the first run ran the prefix once, the second the whole rows
    (shared, grads), (whole, expected) = runs
    assert shared == pytest.approx(whole, rel=1e-5) and whole > 1.0
    for a, b in zip(grads, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_under_lora_the_shared_prompt_gives_the_adapters_the_whole_rows_gradients(
    tmp_path, data_dir, init_dir
):
    from datasets import Dataset
    from peft import get_peft_model

    from gymflow.models.build import lora_config
    from gymflow.train import sft, shared_prompt

    tok = AutoTokenizer.from_pretrained(init_dir)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(init_dir), lora_config(4))
    for name, p in model.named_parameters():  # LoRA's B starts at zero: give every adapter a gradient path
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    args = sft_args(SFTParams(envs={"maze": 1}, max_length=1024, bf16=False), tmp_path / "out")
    data = Dataset.from_list(conversations(data_dir, ["maze"])[:4])
    trainer = sft.AssistantLossTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    assert shared_prompt.shared_prefix(batch["input_ids"], batch["labels"]) > 32
    trained = [p for p in model.parameters() if p.requires_grad]
    assert trained and len(trained) < len(list(model.parameters()))  # the adapters only
    runs = []
    for share in (True, False):
        model.zero_grad()
        loss, _ = sft.assistant_loss(model, model, batch, share=share)
        loss.backward()
        runs.append((loss.item(), [p.grad.clone() for p in trained]))
    (shared, grads), (whole, expected) = runs
    assert shared == pytest.approx(whole, rel=1e-5)
    for a, b in zip(grads, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4) and a.abs().sum() > 0


def test_each_batch_holds_rows_of_one_system_prompt_in_trls_length_grouped_order(
    tmp_path, data_dir, init_dir
):
    from datasets import Dataset
    from trl import SFTTrainer

    from gymflow.train.sft import AssistantLossTrainer

    convs = conversations(data_dir, ["maze"])
    other = [
        {"messages": [{**c["messages"][0], "content": "Another agent. " * 20}, *c["messages"][1:]]}
        for c in convs
    ]
    tok = AutoTokenizer.from_pretrained(init_dir)
    args = sft_args(SFTParams(envs={"maze": 1}, max_length=1024, bf16=False, batch_size=4), tmp_path / "out")

    def batches(cls, data):
        trainer = cls(
            model=AutoModelForCausalLM.from_pretrained(init_dir),
            args=args,
            train_dataset=Dataset.from_list(data),
            processing_class=tok,
        )
        torch.manual_seed(0)
        return [b["input_ids"] for b in trainer.get_train_dataloader()]

    ours, trls = batches(AssistantLossTrainer, convs), batches(SFTTrainer, convs)
    assert all(torch.equal(a, b) for a, b in zip(ours, trls, strict=True))  # one system prompt: TRL's order
    starts = [{tuple(row[:32].tolist()) for row in b} for b in batches(AssistantLossTrainer, convs + other)]
    assert len(starts) == 12 and all(len(s) == 1 for s in starts)  # 48 rows: 12 batches of one prompt each
    assert len({next(iter(s)) for s in starts}) == 2
    mixed = [{tuple(row[:32].tolist()) for row in b} for b in batches(SFTTrainer, convs + other)]
    assert any(len(s) > 1 for s in mixed)  # where TRL's own order mixes them
