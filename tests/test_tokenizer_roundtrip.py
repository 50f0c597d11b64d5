"""The tokenizer `init_model` builds is the one every stage loads: through each loading path (the init
directory, a stage's output after SFT, a TRL checkpoint, RL, the server, the policy loader), every text
encodes to the ids the built `tokenizer.json` gives, and every saved `tokenizer.json` encodes the same."""

import re
import unicodedata

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig, RLParams, RolloutParams, SFTParams
from gymflow.envs import ENVS, make_env
from gymflow.envs.instructions import build_splits
from gymflow.envs.maze import Maze
from gymflow.errors import UserError
from gymflow.models.build import build_initial, build_model, load_tokenizer
from gymflow.models.tokenizer import CHAT_TEMPLATE, IM_END, IM_START, PAD
from gymflow.rollout.expert import run_expert

TASKS = build_splits(Maze, 4, 0, seed=0)["train"]
SYSTEM_PROMPTS = [cls.spec.system_prompt for cls in ENVS.values()]
TEXTS = [
    "Thought: the goal is up and right, so I move up.\nAction: move up",
    "café Café",  # é composed
    "cafe\u0301 Cafe\u0301",  # é decomposed: a normalizer would compose it
    "\u212b \u00c5 A\u030a \ufb01le",  # Angstrom sign, Å composed and decomposed, a ligature
    "12345 3.14159 2024-01-05 x1y22z333 000",
    "a    b\t\t c   \n   ",
    "line one\n\n\nline two\r\nend\n",
    "[/x] [red]not markup[/red]",
    "don't you'll WE'RE it's",
    "日本語 Ünïcödé ✓ 🙂",
    f"{IM_START}user\nhi there{IM_END}\n{IM_START}assistant\n",
    *SYSTEM_PROMPTS,
]


def _conversations() -> list[list[dict[str, str]]]:
    env = make_env("maze")
    return [[{"role": m.role, "content": m.text} for m in run_expert(env, t).messages] for t in TASKS]


@pytest.fixture(scope="module")
def init(tmp_path_factory):
    """A tiny tokenizer and model built as `init_model` builds them, from texts like those it encodes."""
    path = tmp_path_factory.mktemp("init")
    texts = [m["content"] for c in _conversations() for m in c] + TEXTS
    cfg = ModelConfig(
        vocab_size=400, hidden_size=32, intermediate_size=64, layers=1, heads=2, kv_heads=2, max_length=1024
    )
    build_initial(texts * 2, cfg, path)
    return path


@pytest.fixture(scope="module")
def built(init):
    """The reference: the built tokenizer.json, read by the `tokenizers` library alone."""
    return Tokenizer.from_file(str(init / "tokenizer.json"))


@pytest.fixture(scope="module")
def sft(init, tmp_path_factory):
    """The output of a short `train_sft` (as `sft` and AgentEvol's `learn` write it)."""
    from gymflow.train.sft import train_sft

    out = tmp_path_factory.mktemp("sft")
    data = [{"messages": c[:-1]} for c in _conversations()]
    cfg = SFTParams(envs={"maze": 1}, batch_size=4, bf16=False, log_every=1)
    train_sft(str(init), out / "model", data, cfg, out / "sft.csv")
    return out / "model"


@pytest.fixture(scope="module")
def checkpoint(init, tmp_path_factory):
    """A checkpoint TRL's SFTTrainer writes mid-run, with its `processing_class`."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    out = tmp_path_factory.mktemp("checkpoints")
    args = SFTConfig(
        output_dir=str(out),
        assistant_only_loss=True,
        max_length=1024,
        max_steps=1,
        save_steps=1,
        per_device_train_batch_size=2,
        use_cpu=True,
        report_to=[],
    )
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(init),
        args=args,
        train_dataset=Dataset.from_list([{"messages": c[:-1]} for c in _conversations()]),
        processing_class=load_tokenizer(init),
    )
    trainer.train()
    return out / "checkpoint-1"


@pytest.fixture(scope="module")
def rl(init, tmp_path_factory):
    """The output of one tiny RL iteration (`train_rl`)."""
    from gymflow.train.rl import train_rl

    out = tmp_path_factory.mktemp("rl")
    params = RLParams(tasks={"maze": 2}, samples=2, iterations=1, lr=1e-3, horizon=[{"turns": 2}])
    play = RolloutParams(max_new_tokens=8, max_length=1024, batch_size=4)
    train_rl(str(init), out / "model", {"maze": TASKS[:2]}, params, play, out / "rollouts", out / "rl.csv")
    return out / "model"


def _server(path):
    from gymflow.models.server import load

    return load(path)[1]


def _policy(path):
    from gymflow.rollout.play import load_policy

    return load_policy("p", path).fmt.tokenizer


LOADERS = {"AutoTokenizer": AutoTokenizer.from_pretrained, "load_tokenizer": load_tokenizer}
PATHS = [(name, d) for d in ["init", "sft", "checkpoint", "rl"] for name in LOADERS] + [
    ("server", "init"),
    ("server", "sft"),
    ("policy", "rl"),
]


def _load(name, path):
    return {**LOADERS, "server": _server, "policy": _policy}[name](path)


def test_texts_cover_what_a_normalizer_or_another_split_would_change():
    assert any(unicodedata.normalize("NFC", t) != t for t in TEXTS)  # decomposed letters
    assert any(re.search(r"\d\d", t) for t in TEXTS)  # digit runs (Qwen splits them, GPT-2 does not)
    assert any("   " in t for t in TEXTS) and any("\n\n" in t for t in TEXTS)  # whitespace, newline runs


@pytest.mark.parametrize(("loader", "where"), PATHS, ids=[f"{n}-{d}" for n, d in PATHS])
def test_every_loading_path_encodes_and_decodes_as_the_built_tokenizer_json(loader, where, built, request):
    tok = _load(loader, request.getfixturevalue(where))
    fmt = ChatFormat(tok)
    for text in TEXTS:
        ids = built.encode(text, add_special_tokens=False).ids
        assert fmt.encode(text) == ids, (type(tok).__name__, text)
        assert tok(text)["input_ids"] == built.encode(text).ids  # as the server encodes a text prompt
        assert tok.decode(ids) == built.decode(ids, skip_special_tokens=False)
    rendered = tok.apply_chat_template(
        [{"role": "system", "content": SYSTEM_PROMPTS[0]}, {"role": "user", "content": TEXTS[2]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert fmt.prompt(SYSTEM_PROMPTS[0], TEXTS[2]) == built.encode(rendered, add_special_tokens=False).ids


@pytest.mark.parametrize("where", ["sft", "checkpoint", "rl"])
def test_every_saved_tokenizer_json_encodes_as_the_built_one(where, built, request):
    saved = Tokenizer.from_file(str(request.getfixturevalue(where) / "tokenizer.json"))
    for text in TEXTS:
        assert saved.encode(text).ids == built.encode(text).ids, text
    assert saved.get_vocab() == built.get_vocab()


@pytest.mark.parametrize("where", ["init", "sft", "checkpoint", "rl"])
def test_specials_and_the_assistant_mask_survive_every_save(where, built, request):
    tok = load_tokenizer(request.getfixturevalue(where))
    assert (tok.eos_token, tok.pad_token, tok.padding_side) == (IM_END, PAD, "left")
    assert (tok.eos_token_id, tok.pad_token_id) == (built.token_to_id(IM_END), built.token_to_id(PAD))
    assert tok.chat_template == CHAT_TEMPLATE
    messages = _conversations()[0][:5]
    out = tok.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    trained = [i for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    replies = [m["content"] + IM_END for m in messages if m["role"] == "assistant"]
    assert trained == [i for r in replies for i in built.encode(r, add_special_tokens=False).ids]


def test_a_directory_whose_tokenizer_loads_differently_from_its_file_is_refused(tmp_path):
    """A tokenizer built as before this fix (byte-level split, no normalizer) in a qwen2 model directory:
    transformers loads it with Qwen2's normalizer and split, so it would train on other ids than its file's."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=[PAD, IM_START, IM_END], initial_alphabet=alphabet
    )
    bpe.train_from_iterator(TEXTS * 3, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=IM_END, pad_token=PAD)
    cfg = ModelConfig(hidden_size=16, intermediate_size=32, layers=1, heads=2, kv_heads=2, max_length=128)
    build_model(cfg, tok).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.raises(UserError, match="init_model"):
        load_tokenizer(tmp_path)
