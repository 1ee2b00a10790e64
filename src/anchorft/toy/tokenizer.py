"""The testbed's tokenizer: characters plus whole template words, trained with the `tokenizers` library.

A BPE model trained with no merges (vocabulary = special tokens + the characters of the corpus)
is a character-level tokenizer, which keeps digits and the letters of random strings one token
each (helpful for arithmetic, reversal, sorting, counting). On top of it, `words` (the prompts'
own words, e.g. "reverse", "colour") become one token each wherever they stand as a whole word
(`AddedToken(single_word=True)`: never inside a longer string), and `symbols` (format markers
such as "\\boxed{") one token each anywhere: the documents get 40-45 % shorter than letter by
letter, which is what a step costs, while every skill still sees the letters it works on. It
adds BOS in front of every encoded text (like Llama), decodes by concatenation, and carries a
chat template that renders one user turn exactly as `skills.format_prompt` does, so that the
conversational and the plain prompt/completion forms give the same tokens. Saved beside a
`LlamaConfig` model, `AutoTokenizer.from_pretrained` reloads it as the same tokenizer (a Qwen2
config would make AutoTokenizer swap the pre-tokenizer).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, processors, trainers
from transformers import PreTrainedTokenizerFast

__all__ = ["PAD", "BOS", "EOS", "CHAT_TEMPLATE", "train_tokenizer"]

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ 'Q:' + message['content'] + '\\nA:' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% endif %}{% endfor %}"
)


def train_tokenizer(
    texts: Iterable[str], merges: int = 0, words: Iterable[str] = (), symbols: Iterable[str] = ()
) -> PreTrainedTokenizerFast:
    """Train a BPE tokenizer on `texts` with `merges` merges (0: character level), then add `words` as
    whole-word tokens and `symbols` as tokens matched anywhere (both before the BPE model sees the text)."""
    texts, words, symbols = list(texts), list(words), list(symbols)
    if bad := [w for w in words if not w.isalnum()]:
        raise ValueError(f"words: must be letters or digits only (use symbols for markers), got {bad}")
    if not texts:
        raise ValueError("texts: need at least one training text")
    if merges < 0:
        raise ValueError(f"merges: must be >= 0, got {merges}")
    alphabet = sorted(set("".join(texts)))
    specials = [PAD, BOS, EOS]
    tok = Tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=len(specials) + len(alphabet) + merges,
        special_tokens=specials,
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, bos_id)])
    tok.decoder = decoders.Fuse()
    tok.add_tokens([AddedToken(w, single_word=True, normalized=False) for w in words])
    tok.add_tokens([AddedToken(s, normalized=False) for s in symbols])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        padding_side="right",
    )
