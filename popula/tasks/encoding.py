"""A prompt's token ids, as every base saw its prompts in training: the run, evaluation and the ladder
encode with it (its own module, not `prompts.py`, whose source keys the tiny base's cache)."""

from __future__ import annotations

from typing import Any


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Prompt ids as the base saw them in training: BOS (when the tokenizer has one) then the text.

    The tiny base was trained with `<|end|>` (its BOS and EOS) before every prompt; a chat
    template that already starts with the BOS text does not get a second one.
    """
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    bos = tokenizer.bos_token_id
    if bos is None or (tokenizer.bos_token and text.startswith(tokenizer.bos_token)):
        return ids
    return [bos] + ids
