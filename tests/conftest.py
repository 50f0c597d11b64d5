"""Fixtures shared by the SWEET-RL tests (critic, Best-of-N, actor pairs, DPO), and Ctrl-C as a user sends it."""

import signal

import pytest
import torch

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig
from gymflow.envs import make_env
from gymflow.envs.colbench import ColBench
from gymflow.models.build import build_model
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout.expert import run_expert

# A shell starts a background job of a script with SIGINT ignored, and processes started from it inherit that:
# then the stages and `gymflow sql` the Ctrl-C tests interrupt would never see the signal. Ctrl-C as a terminal
# sends it is what those tests check, so the suite restores Python's own handler before it starts any process.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TINY = ModelConfig(hidden_size=32, intermediate_size=64, layers=1, heads=2, kv_heads=2, max_length=2048)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread: the tiny models gain nothing from two on cores other tests share (sampling was 100x
    slower on two oversubscribed ones)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def fmt(request):
    """The chat format of a tokenizer trained on the expert episodes and hidden texts of the requesting test
    module's colbench `TASKS` (a module with a `fmt` of its own uses that)."""
    tasks = request.module.TASKS
    env = make_env("colbench")
    texts = [m.text for t in tasks for m in run_expert(env, t).messages] + [
        ColBench.hidden_text(t) for t in tasks
    ]
    return ChatFormat(train_tokenizer(texts * 3, 500))


@pytest.fixture(scope="module")
def policy(fmt):
    """A tiny random policy over `fmt`'s vocabulary."""
    return build_model(TINY, fmt.tokenizer).eval()
