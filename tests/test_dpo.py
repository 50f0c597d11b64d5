"""DPO (SWEET-RL's Eq. 4 and the multi-turn baseline) against numbers worked out by hand and an independent
forward pass: the loss on one pair, the NLL term, a two-turn episode pair whose observations carry no weight,
the gradient's direction, the schedule of batches, a few steps raising the margin, LoRA, and a stopped run
resuming to the weights of one that never stopped."""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from gymflow.config import ModelConfig
from gymflow.errors import UserError
from gymflow.models.build import build_model
from gymflow.models.tokenizer import train_tokenizer
from gymflow.train import dpo as dpo_mod
from gymflow.train.dpo import (
    DPOParams,
    Pair,
    dpo_loss,
    nll_loss,
    pair_logps,
    schedule,
    sequence_logps,
    train_dpo,
)
from gymflow.train.logprobs import token_logprobs

TEXTS = [
    "Thought: I ask.\nAction: ask What is the rate?",
    "The rate is 5 percent.",
    "def f(x):\n    return x",
]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS * 5, 320)


@pytest.fixture(scope="module")
def start(tokenizer, tmp_path_factory):
    """A tiny policy saved as a model directory."""
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, layers=1, heads=2, kv_heads=2, max_length=512)
    path = tmp_path_factory.mktemp("policy")
    build_model(cfg, tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _pairs(tokenizer, n: int) -> list[Pair]:
    """`n` per-turn pairs on a shared context: two different replies (ids of the texts above)."""
    context = tokenizer(TEXTS[0] + TEXTS[1], add_special_tokens=False)["input_ids"]
    out = []
    for i in range(n):
        good = tokenizer(f"ask the rate {i}", add_special_tokens=False)["input_ids"] + [
            tokenizer.eos_token_id
        ]
        bad = tokenizer(f"submit {i} now", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        out.append(Pair.reply(context[: 10 + i], good, bad))
    return out


# ---- the loss on hand-worked numbers ---------------------------------------------------------------------


def test_dpo_loss_on_one_pair_with_known_log_probs():
    # chosen: log pi -10, log pi_ref -11 -> +1; rejected: -12 against -11 -> -1; beta 0.1:
    # -log sigma(0.1 * (1 - (-1))) = -log sigma(0.2) = log(1 + e^-0.2) = 0.598139
    loss = dpo_loss(
        torch.tensor([-10.0]), torch.tensor([-12.0]), torch.tensor([-11.0]), torch.tensor([-11.0]), 0.1
    )
    assert loss.item() == pytest.approx(0.5981389, abs=1e-6)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-0.2)), abs=1e-7)
    # the policy equal to the reference: log 2, whatever the sequences' own probabilities
    same = dpo_loss(
        torch.tensor([-3.0]), torch.tensor([-30.0]), torch.tensor([-3.0]), torch.tensor([-30.0]), 0.1
    )
    assert same.item() == pytest.approx(math.log(2), abs=1e-7)


def test_nll_term_is_the_chosen_sides_mean_per_counted_id():
    # two pairs: chosen log pi -6 over 3 ids -> 2.0; -1 over 4 ids -> 0.25
    nll = nll_loss(torch.tensor([-6.0, -1.0]), torch.tensor([3.0, 4.0]))
    assert nll.tolist() == pytest.approx([2.0, 0.25])


def test_a_two_turn_episode_pair_counts_only_reply_ids():
    # ids:      system obs1 | reply1 reply1 | obs2 obs2 | reply2
    # chosen:   per-id log pi under the policy and the reference; the mask counts the replies only
    mask_c = torch.tensor([[0, 0, 1, 1, 0, 0, 1]], dtype=torch.float32)
    pol_c = torch.tensor([[-9.0, -9.0, -1.0, -2.0, -5.0, -6.0, -0.5]])
    ref_c = torch.tensor([[-8.0, -8.0, -1.5, -2.5, -4.0, -4.0, -1.0]])
    # rejected: a one-id first reply, a longer observation, a two-id second reply
    mask_r = torch.tensor([[0, 0, 1, 0, 0, 0, 1, 1]], dtype=torch.float32)
    pol_r = torch.tensor([[-9.0, -9.0, -3.0, -5.0, -5.0, -5.0, -1.0, -2.0]])
    ref_r = torch.tensor([[-8.0, -8.0, -2.0, -4.0, -4.0, -4.0, -1.0, -1.5]])

    def loss(pc, pr):
        c, r = sequence_logps(pc, mask_c), sequence_logps(pr, mask_r)
        rc, rr = sequence_logps(ref_c, mask_c), sequence_logps(ref_r, mask_r)
        return dpo_loss(c, r, rc, rr, beta=0.5) + 0.01 * nll_loss(c, mask_c.sum(-1))

    # by hand: chosen log pi = -1 - 2 - 0.5 = -3.5, ref -1.5 - 2.5 - 1 = -5 -> +1.5;
    # rejected -3 - 1 - 2 = -6, ref -2 - 1 - 1.5 = -4.5 -> -1.5; z = 0.5 * (1.5 + 1.5) = 1.5;
    # NLL = 3.5 / 3 ids
    expected = math.log(1 + math.exp(-1.5)) + 0.01 * 3.5 / 3
    assert loss(pol_c, pol_r).item() == pytest.approx(expected, abs=1e-6)
    moved_c, moved_r = pol_c.clone(), pol_r.clone()
    moved_c[0, [0, 1, 4, 5]] = torch.tensor([-0.1, -40.0, -0.2, -30.0])  # system prompt and observation ids
    moved_r[0, [3, 4, 5]] = torch.tensor([-0.3, -20.0, -0.01])
    assert loss(moved_c, moved_r).item() == pytest.approx(expected, abs=1e-6)
    moved_c[0, 6] -= 1.0  # a reply id: the loss changes
    assert loss(moved_c, moved_r).item() != pytest.approx(expected, abs=1e-3)


def test_the_gradient_raises_the_chosen_side_and_lowers_the_rejected_one():
    chosen, rejected = torch.tensor([-5.0], requires_grad=True), torch.tensor([-5.0], requires_grad=True)
    dpo_loss(chosen, rejected, torch.tensor([-5.0]), torch.tensor([-5.0]), 0.1).sum().backward()
    # d/dc -log sigma(beta (c - r)) = -beta sigma(-beta (c - r)) = -0.1 * 0.5 at c = r
    assert chosen.grad.item() == pytest.approx(-0.05) and rejected.grad.item() == pytest.approx(0.05)


def test_a_pair_needs_counted_ids_and_context_first():
    with pytest.raises(ValueError, match="counted ids"):
        Pair([1, 2], [0, 0], [1, 3], [0, 1])
    with pytest.raises(ValueError, match="context"):
        Pair([1, 2], [1, 1], [1, 3], [0, 1])
    pair = Pair.reply([7, 8, 9], [4, 2], [5])
    assert pair.chosen_ids == [7, 8, 9, 4, 2] and pair.chosen_mask == [0, 0, 0, 1, 1]
    assert pair.rejected_ids == [7, 8, 9, 5] and pair.rejected_mask == [0, 0, 0, 1]


# ---- the forward pass --------------------------------------------------------------------------------------


def test_token_log_probs_equal_the_full_softmax_at_counted_ids_padding_included(start):
    model = AutoModelForCausalLM.from_pretrained(start).eval()
    long = [5, 9, 30, 31, 60, 61, 62, 100]
    short = [5, 9, 30, 200, 201]
    masks = [[0, 0, 1, 1, 0, 0, 1, 1], [0, 0, 0, 1, 1]]
    with torch.no_grad():
        got, counted = token_logprobs(model, [long, short], masks, pad_id=0)
        for row, (ids, mask) in enumerate(zip([long, short], masks, strict=True)):
            full = model(torch.tensor([ids])).logits[0].log_softmax(-1)  # alone: no padding
            want = [full[i - 1, ids[i]].item() if mask[i] else 0.0 for i in range(len(ids))]
            assert got[row, : len(ids)].tolist() == pytest.approx(want, abs=1e-5)
            assert counted[row, : len(ids)].tolist() == mask
        assert got[1, len(short) :].abs().sum() == 0  # padding counts nothing


# ---- training ------------------------------------------------------------------------------------------


def test_batches_cover_each_epoch_once_and_a_fraction_as_a_seeded_draw():
    cfg = DPOParams(epochs=2.5, batch_size=3, seed=4)
    batches = schedule(4, cfg)
    order = [i for b in batches for i in b]
    assert len(order) == 10 and [len(b) for b in batches] == [3, 3, 3, 1]
    assert sorted(order[:4]) == sorted(order[4:8]) == [0, 1, 2, 3] and len(set(order[8:])) == 2
    assert schedule(4, cfg) == batches and schedule(4, DPOParams(epochs=2.5, batch_size=3, seed=5)) != batches


def test_a_few_steps_on_one_pair_raise_the_chosen_vs_rejected_margin(start, tokenizer, tmp_path):
    pair = _pairs(tokenizer, 1)
    cfg = DPOParams(lr=3e-3, epochs=6, batch_size=1, warmup=0, nll_coef=0.0, log_every=1)
    metrics = train_dpo(str(start), tmp_path / "out", pair, cfg, tmp_path / "curve.csv")
    pad = tokenizer.pad_token_id
    with torch.no_grad():
        before = pair_logps(AutoModelForCausalLM.from_pretrained(start), pair, pad)
        after = pair_logps(AutoModelForCausalLM.from_pretrained(tmp_path / "out"), pair, pad)
    margin = (after[0] - before[0]) - (after[1] - before[1])
    assert margin.item() > 1.0 and metrics["reward_margin"] == pytest.approx(0.1 * margin.item(), rel=0.2)
    assert metrics["steps"] == 6 and metrics["accuracy"] == 1.0
    rows = (tmp_path / "curve.csv").read_text().splitlines()
    assert rows[0].split(",")[:3] == ["step", "loss", "dpo_loss"] and len(rows) == 7
    losses = [float(r.split(",")[1]) for r in rows[1:]]
    assert losses[0] == pytest.approx(math.log(2), abs=1e-4) and losses[-1] < losses[0]  # step 1: pi = pi_ref


def test_lora_trains_adapters_and_saves_an_ordinary_model(start, tokenizer, tmp_path):
    pairs = _pairs(tokenizer, 2)
    cfg = DPOParams(lr=1e-2, epochs=2, batch_size=2, warmup=0, lora_rank=2)
    train_dpo(str(start), tmp_path / "out", pairs, cfg, tmp_path / "curve.csv")
    base = AutoModelForCausalLM.from_pretrained(start).state_dict()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "out").state_dict()
    assert merged.keys() == base.keys()  # adapters merged: no LoRA names left
    assert any(not torch.equal(base[k], merged[k]) for k in base)


def test_no_pairs_is_a_user_error(start, tmp_path):
    with pytest.raises(UserError, match="no preference pairs"):
        train_dpo(str(start), tmp_path / "out", [], DPOParams(), tmp_path / "curve.csv")


def test_a_stopped_run_resumes_to_the_weights_and_curve_of_an_uninterrupted_one(
    start, tokenizer, tmp_path, monkeypatch
):
    pairs = _pairs(tokenizer, 6)
    cfg = DPOParams(lr=3e-3, epochs=1, batch_size=1, warmup=5, log_every=4)  # a checkpoint after each step
    whole = train_dpo(str(start), tmp_path / "whole", pairs, cfg, tmp_path / "whole.csv")

    step, calls = dpo_mod.update, []

    def killed_at_step_four(*args):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt  # after the checkpoint of step 3, before step 4's update
        return step(*args)

    monkeypatch.setattr(dpo_mod, "update", killed_at_step_four)
    with pytest.raises(KeyboardInterrupt):
        train_dpo(str(start), tmp_path / "resumed", pairs, cfg, tmp_path / "resumed.csv")
    assert not (tmp_path / "resumed").exists() and list(tmp_path.glob("resumed.checkpoints/*/state.pt"))
    monkeypatch.setattr(dpo_mod, "update", lambda *args: calls.append(2) or step(*args))
    resumed = train_dpo(str(start), tmp_path / "resumed", pairs, cfg, tmp_path / "resumed.csv")
    assert calls.count(2) == 3  # steps 4-6 only

    a = AutoModelForCausalLM.from_pretrained(tmp_path / "whole").state_dict()
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "resumed").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "whole.csv").read_text() == (tmp_path / "resumed.csv").read_text()
    assert resumed["train_loss"] == whole["train_loss"] and resumed["reward_margin"] == whole["reward_margin"]
    assert not (tmp_path / "resumed.checkpoints").exists()
