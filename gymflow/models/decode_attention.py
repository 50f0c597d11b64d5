"""The attention of a decoding step (one query per row) as a small C++ kernel, for CPU rollouts.

Decoding is bound by reading the KV cache, and PyTorch's fused `scaled_dot_product_attention` reads it at about
half the machine's streaming rate for one query per row (it pays per row and head for a matrix-vector product:
`benchmarks/decode_attention.py`). `decode_attention.cpp` streams each row's keys and values once, with a
running softmax, on PyTorch's own thread pool (`at::parallel_for`: no second pool competes with PyTorch's threads
for the cores). Everything else, prefill and training included, goes to PyTorch's kernel unchanged.

The kernel is compiled once per machine and CPU capability (`torch.utils.cpp_extension`, kept in PyTorch's
extensions folder, `$TORCH_EXTENSIONS_DIR` where set; `install.sh` builds it). Where it cannot be built, decoding warns once and uses PyTorch's.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import math
import os
import threading
import warnings
from pathlib import Path
from types import ModuleType

import torch
from transformers import AttentionInterface, AttentionMaskInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

# An attention implementation for transformers: the kernel in decoding steps, PyTorch's sdpa everywhere else.
NAME = "gymflow_decode"
SOURCE = Path(__file__).with_name("decode_attention.cpp")
ISA_FLAGS = {  # what PyTorch's own kernels use here (ATEN_CPU_CAPABILITY lowers it), so benchmarks compare alike
    "AVX512": ["-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mavx2", "-mfma"],
    "AVX2": ["-mavx2", "-mfma"],
}
# Reassociation lets the compiler vectorize the dot products; no flag assumes finite numbers (masked -inf).
FLAGS = [
    "-O3",
    "-fopenmp",
    *["-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros"],
]


_building = threading.Lock()  # the server samples on several threads; one of them builds


def kernel() -> ModuleType | None:
    """The compiled kernel for this CPU's capability, or None (with a warning) where it cannot be built."""
    with _building:
        return _build(torch.backends.cpu.get_cpu_capability())


@functools.cache
def _build(capability: str) -> ModuleType | None:
    """Import the kernel built for this source, these flags and this torch, or build it. The name carries a
    digest of all three, so a build that exists is imported as it is: no compiler, no build lock (a process
    killed inside `load` leaves the lock behind, and every later `load` of that name waits for it)."""
    from torch.utils.cpp_extension import get_default_build_root, load

    flags = [*FLAGS, *ISA_FLAGS.get(capability, [])]
    digest = hashlib.sha256(f"{SOURCE.read_text()}{flags}{torch.__version__}".encode()).hexdigest()[:12]
    name = f"gymflow_decode_attention_{capability.lower()}_{digest}"
    folder = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()) / name  # as PyTorch's
    built = folder / f"{name}.so"
    try:
        if built.is_file():
            spec = importlib.util.spec_from_file_location(name, built)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        folder.mkdir(parents=True, exist_ok=True)
        return load(name=name, sources=[str(SOURCE)], extra_cflags=flags, build_directory=str(folder))
    except (OSError, RuntimeError, ImportError) as error:  # no compiler, no headers, no ninja
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        warnings.warn(
            f"the decode attention kernel could not be built ({reason}); decoding uses PyTorch's attention, "
            "about 1.3x slower at large batches: install gcc and the Python headers to build it",
            stacklevel=3,
        )
        return None


def _decode_mask(attention_mask: torch.Tensor | None, batch: int, context: int) -> torch.Tensor | None:
    """The (batch, context) bool mask of a decoding step, or None where the mask is of another kind."""
    if attention_mask is None:
        return torch.ones(batch, context, dtype=torch.bool, device="cpu")
    if attention_mask.dtype != torch.bool or attention_mask.dim() != 4 or attention_mask.shape[1:3] != (1, 1):
        return None
    return attention_mask[:, 0, 0].expand(batch, context).contiguous()


def attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """A transformers attention function: the kernel for one fp32 query per row on CPU without gradients,
    `sdpa_attention_forward` for everything else."""
    batch, heads, length, dim = query.shape
    fits = (
        length == 1
        and query.device.type == "cpu"
        and query.dtype == key.dtype == value.dtype == torch.float32
        and not torch.is_grad_enabled()
        and (dropout == 0.0 or not module.training)
        and kwargs.get("sliding_window") is None
        and kwargs.get("softcap") is None
        and key.stride(-1) == value.stride(-1) == 1
    )
    mask = _decode_mask(attention_mask, batch, key.shape[2]) if fits else None
    compiled = kernel() if mask is not None else None
    if compiled is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    scale = scaling if scaling is not None else 1 / math.sqrt(dim)
    out = compiled.attend(query[:, :, 0].contiguous(), key, value, mask, scale)
    return out[:, None], None  # (batch, 1, heads, dim), as transformers' attention functions return


AttentionInterface.register(NAME, attention)
AttentionMaskInterface.register(NAME, sdpa_mask)


def use_for_decoding(model: PreTrainedModel) -> None:
    """Decode with the kernel where the model runs PyTorch's sdpa on CPU. Only the decoding steps change:
    `attention` hands everything else to sdpa, and the choice is not saved with the model. A wrapper without
    the model's config (the server's `Guarded`) is left alone: its owner calls this on the model."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) == "sdpa" and model.device.type == "cpu":
        model.set_attn_implementation(NAME)
