"""The tiny base's tokenizer: byte-level BPE trained on the cold-start corpus.

Byte-level so any text round-trips; digits are split one per token so the model sees
numbers digit by digit (what arithmetic in code_o answers needs); `<|end|>` ends every
completion and doubles as EOS, `<|pad|>` pads batches.
"""

from __future__ import annotations

from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from popula.tasks.prompts import COMPACT_EOS, COMPACT_PAD


def train_tokenizer(texts: Iterable[str], vocab_size: int, max_length: int = 1024) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts` and wrap it for transformers (and vLLM)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[COMPACT_PAD, COMPACT_EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=COMPACT_EOS,
        pad_token=COMPACT_PAD,
        bos_token=COMPACT_EOS,
        clean_up_tokenization_spaces=False,
        model_max_length=max_length,
    )
