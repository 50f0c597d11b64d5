"""A byte-level BPE tokenizer trained on the project's own text, with ChatML special tokens and a chat
template whose assistant turns carry `{% generation %}` markers (the assistant-only loss mask).

Byte-level, so any text an environment or a model writes can be encoded; trained on instructions and
trajectories, so the small vocabulary the tiny model can afford is spent on the words it will see.

The merges are learned with the normalizer and pre-tokenizer every loader gives a qwen2 model directory:
transformers 5 builds `Qwen2Tokenizer` for a qwen2 config whatever `tokenizer_config.json` names, and that
class replaces the pipeline `tokenizer.json` declares with its own (NFC, then Qwen's split: digits one by
one, then bytes). Merges learned under another split (GPT-2's, up to 65cfb45) were then applied to text split
differently: the stages trained and sampled on other ids than the file's. Learned under Qwen2Tokenizer's own
pipeline, the file and every loader agree (tests/test_tokenizer_roundtrip.py); `benchmarks/episode_tokens.py`
measures what it changed in tokens per episode.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Tokenizer

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]

# ChatML, as Qwen2 uses it. The assistant's reply and its <|im_end|> are what the model samples, so they are
# inside the generation markers (trained on); the newline after <|im_end|> is the template's, not the model's.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{% generation %}{{- message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of at most `vocab_size` tokens (special tokens included) on `texts`, with the
    normalizer, split and decoder of `Qwen2Tokenizer`."""
    bpe = Tokenizer(models.BPE())
    qwen2 = Qwen2Tokenizer().backend_tokenizer  # the pipeline a qwen2 model directory loads with (see above)
    bpe.normalizer, bpe.pre_tokenizer, bpe.decoder = qwen2.normalizer, qwen2.pre_tokenizer, qwen2.decoder
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=IM_END,
        pad_token=PAD,
        additional_special_tokens=[IM_START],
        chat_template=CHAT_TEMPLATE,
        padding_side="left",  # batched generation appends on the right
    )
