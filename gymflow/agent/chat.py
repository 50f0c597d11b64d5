"""Token-exact chat formatting for multi-turn rollouts, derived from the tokenizer's own chat template.

A rollout's sequence is: the prompt (system message, first observation, assistant header), then per turn
the sampled reply ids as they are, then the ids between that reply and the next one (the end-of-turn token
if the reply was cut off, the template's text after an assistant turn, the next observation as a user turn,
the assistant header). Only the reply ids are trained on. The pieces come from rendering the template
around placeholder messages, so any ChatML-like template (ours, Qwen's) gives its own exact text.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

_USER, _REPLY = "\x00user\x00", "\x00reply\x00"


class ChatFormat:
    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.eos_token_id
        eos = tokenizer.eos_token
        before = self._render([("user", _USER), ("assistant", _REPLY)])
        after = self._render(
            [("user", _USER), ("assistant", _REPLY), ("user", _USER)], generation_prompt=True
        )
        end_of_reply = before.index(_REPLY + eos) + len(_REPLY + eos)
        self.after_reply = before[end_of_reply:]  # e.g. "\n" after <|im_end|>
        self.user_turn = after[
            len(before) :
        ]  # e.g. "<|im_start|>user\n\x00user\x00<|im_end|>\n<|im_start|>assistant\n"

    def _render(self, messages: Sequence[tuple[str, str]], generation_prompt: bool = False) -> str:
        chat = [{"role": role, "content": text} for role, text in messages]
        return self.tokenizer.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt(self, system: str, observation: str) -> list[int]:
        """The first context: system message and first observation, up to the assistant header."""
        return self.encode(self._render([("system", system), ("user", observation)], generation_prompt=True))

    def between(self, reply_ids: Sequence[int], observation: str) -> list[int]:
        """The context ids after a sampled reply and before the next one."""
        closing = [] if reply_ids and reply_ids[-1] == self.eos_id else [self.eos_id]
        return closing + self.encode(self.after_reply + self.user_turn.replace(_USER, observation))

    def reply_text(self, reply_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(reply_ids, skip_special_tokens=True)
