"""`gymflow.models.decode_attention`: the C++ kernel of a decoding step's attention, against numbers worked by
hand and a softmax written out, and the engine's greedy decoding with it against PyTorch's attention."""

import math
from pathlib import Path

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from gymflow.config import ModelConfig
from gymflow.models import decode_attention, sampling
from gymflow.models.build import build_model

kernel = decode_attention.kernel()
pytestmark = pytest.mark.skipif(kernel is None, reason="no C++ toolchain to build the kernel")


def written_out(q, k, v, mask, scale):
    """Attention over each row's kept positions, one (row, head) at a time."""
    batch, heads, dim = q.shape
    group = heads // k.shape[1]
    out = torch.zeros(batch, heads, dim, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            keys, values = k[b, h // group][mask[b]].double(), v[b, h // group][mask[b]].double()
            if len(keys):
                out[b, h] = torch.softmax(keys @ q[b, h].double() * scale, 0) @ values
    return out.float()


def test_one_row_by_hand():
    # scores 1*1 + 0*0 = 1, 0, and 2*1 = 2 (scale 1); the second position masked out:
    # weights e^1, e^2 over e^1 + e^2; output e^1/(e^1+e^2) * [1, 2] + e^2/(e^1+e^2) * [3, 0]
    q = torch.tensor([[[1.0, 0.0]]])
    k = torch.tensor([[[[1.0, 5.0], [0.0, 1.0], [2.0, -1.0]]]])
    v = torch.tensor([[[[1.0, 2.0], [100.0, 100.0], [3.0, 0.0]]]])
    mask = torch.tensor([[True, False, True]])
    a, b = math.e / (math.e + math.e**2), math.e**2 / (math.e + math.e**2)
    out = kernel.attend(q, k, v, mask, 1.0)
    torch.testing.assert_close(out, torch.tensor([[[a * 1 + b * 3, a * 2 + b * 0]]]))


@pytest.mark.parametrize("dim", [32, 64, 24])  # the compiled head sizes and the general loop
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_the_kernel_is_attention_over_the_kept_positions(dim, kv_heads):
    gen = torch.Generator().manual_seed(dim + kv_heads)
    batch, heads, context = 5, 4, 37
    q = torch.randn(batch, heads, dim, generator=gen)
    # the cache as `GrowingLayer` keeps it: a view of a longer buffer
    k = torch.randn(batch, kv_heads, 64, dim, generator=gen)[:, :, :context]
    v = torch.randn(batch, kv_heads, 64, dim, generator=gen)[:, :, :context]
    mask = torch.rand(batch, context, generator=gen) < 0.7
    mask[0, :20] = False  # left padding
    mask[1] = True
    scale = dim**-0.5
    torch.testing.assert_close(
        kernel.attend(q, k, v, mask, scale), written_out(q, k, v, mask, scale), atol=2e-6, rtol=1e-5
    )


def test_a_row_with_nothing_to_attend_to_gets_zeros():
    q, k, v = torch.ones(2, 1, 4), torch.ones(2, 1, 3, 4), torch.ones(2, 1, 3, 4)
    mask = torch.tensor([[False] * 3, [True] * 3])
    out = kernel.attend(q, k, v, mask, 0.5)
    assert out[0].eq(0).all() and out[1].eq(1).all()


def test_bad_shapes_are_refused():
    q, k = torch.ones(2, 3, 4), torch.ones(2, 2, 5, 4)  # 3 query heads over 2 key/value heads
    with pytest.raises(RuntimeError):
        kernel.attend(q, k, k, torch.ones(2, 5, dtype=torch.bool), 1.0)


class Attention(torch.nn.Module):
    training = False


@pytest.mark.parametrize(
    "case", ["prefill", "gradients", "float64", "float mask"], ids=lambda case: case.replace(" ", "_")
)
def test_what_the_kernel_does_not_cover_goes_to_sdpa(case):
    gen = torch.Generator().manual_seed(1)
    length = 3 if case == "prefill" else 1
    dtype = torch.float64 if case == "float64" else torch.float32
    q = torch.randn(2, 2, length, 8, generator=gen, dtype=dtype)
    k, v = (torch.randn(2, 2, 6, 8, generator=gen, dtype=dtype) for _ in range(2))
    mask = torch.ones(2, 1, length, 6, dtype=torch.bool)
    if case == "float mask":
        mask = torch.zeros(2, 1, length, 6)
    with torch.set_grad_enabled(case == "gradients"):
        ours, _ = decode_attention.attention(Attention(), q, k, v, mask, scaling=0.3)
        want, _ = sdpa_attention_forward(Attention(), q, k, v, mask, scaling=0.3)
    assert torch.equal(ours, want)


def test_greedy_decoding_gives_the_ids_of_pytorchs_attention(monkeypatch):
    torch.manual_seed(0)
    model = build_model(ModelConfig(), Vocab()).eval()
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, 2048, (n,), generator=gen).tolist() for n in (30, 7, 19, 30, 1, 12)]
    ours = sampling.sample(model, prompts, 24, stop_ids=[], pad_id=0, temperature=0)
    assert model.config._attn_implementation == decode_attention.NAME
    model.set_attn_implementation("sdpa")
    monkeypatch.setattr(sampling, "use_for_decoding", lambda model: None)
    theirs = sampling.sample(model, prompts, 24, stop_ids=[], pad_id=0, temperature=0)
    assert model.config._attn_implementation == "sdpa"
    for a, b in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


class Vocab:
    """What `build_model` reads of a tokenizer."""

    pad_token_id, eos_token_id = 0, 1

    def __len__(self) -> int:
        return 2048


def test_without_a_compiler_decoding_warns_and_uses_sdpa(monkeypatch):
    import torch.utils.cpp_extension

    def no_compiler(**kwargs):
        raise RuntimeError("Error building extension 'gymflow_decode_attention': g++: command not found")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", no_compiler)
    with pytest.warns(UserWarning, match="could not be built .*g\\+\\+: command not found.*install gcc"):
        assert (
            decode_attention._build("NO_COMPILER") is None
        )  # a capability of its own: the real one stays built


def test_the_kernel_is_built_where_pytorch_builds_extensions(monkeypatch, tmp_path):
    import torch.utils.cpp_extension

    folders = []
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(
        torch.utils.cpp_extension, "load", lambda **kwargs: folders.append(kwargs["build_directory"])
    )
    decode_attention._build("ELSEWHERE")
    assert len(folders) == 1 and Path(folders[0]).parent == tmp_path and Path(folders[0]).is_dir()
