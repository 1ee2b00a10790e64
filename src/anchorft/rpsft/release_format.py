"""`chat_format: release`: the training text and attention mask of the RPSFT paper's public release.

The default (`chat_format: model`) trains on each model's own chat template (TRL's conversational
prompt/completion path). `release` reproduces the text the release's code builds instead (read off
github jinhangzhan/RPSFT, `sft/src/training/data_qwen.py`, `data.py`, `train.py`), as facts about its output:

- Every (user, assistant) pair is two strings, tokenized separately with `add_special_tokens=False` and
  concatenated; the first (prompt) has labels -100, the second (response) is trained.
- Qwen models (model_type qwen2 / qwen3): the markers are the Llama-3 header strings, which are plain text
  for Qwen's tokenizer, and every newline of the markers is written as the two characters backslash, n:
      prompt   = "<|start_header_id|>user<|end_header_id|>\\n\\n" + USER + "<|eot_id|>\\n"
                 + "<|start_header_id|>assistant<|end_header_id|>\\n\\n"
      response = ASSISTANT + "<|eot_id|>\\n"
  On the first turn a system message (the release's launch passes `--use_cot True`, which adds the boxed
  system prompt; our data carries that prompt as a system message) comes first as
  "<|start_header_id|>system<|end_header_id|>\\n\\n" + SYSTEM + "<|eot_id|>\\n".
- Llama models (model_type llama): the first turn's prompt is the tokenizer's own chat template rendered as
  text (system message included, `add_generation_prompt=True`); later prompts are the header strings with
  real newlines; the response is ASSISTANT + "<|eot_id|>" + a real newline.
  Quirk kept on purpose: the release's data code (`data.py`, `llava_to_openai` and the system message it adds)
  hands the template each message's content as a list `[{"type": "text", "text": ...}]`, and it is rendered
  with those lists. Llama-3.1's template applies `| trim` to the content, which turns the list into its Python
  repr, so the release's first system and user turns read `[{'type': 'text', 'text': '...'}]` (with the text's
  backslashes doubled by the repr) instead of the plain text. `release_segments` renders the same lists, so the
  template does whatever it did in the release; a template that reads list contents renders clean text.
- Attention mask: `input_ids != pad_token_id` over the right-padded batch (the release's collator). The pad
  token is the tokenizer's, or its eos when it has none (as `anchorft.rpsft.train` and the release set it);
  for Llama-3.1-Instruct (no pad token, eos `<|eot_id|>`) every `<|eot_id|>` of a sequence is masked out of
  attention, not only the padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

__all__ = [
    "RELEASE_FAMILIES",
    "release_family",
    "example_messages",
    "release_content_parts",
    "release_segments",
    "release_tokenize",
    "release_dataset",
    "ReleaseCollator",
]

RELEASE_FAMILIES = {"qwen2": "qwen", "qwen3": "qwen", "llama": "llama"}
HEADER_START, HEADER_END, EOT = "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"
LITERAL_NL = "\\n"  # two characters: backslash, n (the release's Qwen markers)


def release_family(model_type: str | None) -> str:
    """'qwen' or 'llama' (the release's two text builders) for a model_type; ValueError naming the supported ones."""
    if model_type not in RELEASE_FAMILIES:
        raise ValueError(
            f"chat_format release: model_type {model_type!r} has no release text format; supported: "
            f"{sorted(RELEASE_FAMILIES)} (use chat_format: model for the model's own template)"
        )
    return RELEASE_FAMILIES[model_type]


def _content(message: dict[str, Any]) -> str:
    c = message.get("content", "")
    if isinstance(c, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)
    return "" if c is None else str(c)


def example_messages(example: dict[str, Any]) -> list[dict[str, str]]:
    """The conversation of one row: conversational `prompt` + `completion`, or `messages`."""
    if "messages" in example and example["messages"] is not None:
        msgs = example["messages"]
    elif isinstance(example.get("prompt"), list) and isinstance(example.get("completion"), list):
        msgs = list(example["prompt"]) + list(example["completion"])
    else:
        raise ValueError(
            "chat_format release needs conversational rows (message lists in prompt/completion or messages)"
        )
    return [{"role": m["role"], "content": _content(m)} for m in msgs]


def release_content_parts(message: dict[str, str]) -> dict[str, Any]:
    """The message as the release's Llama data code hands it to the chat template: its text content as a list with
    one text part, `{"role": ..., "content": [{"type": "text", "text": ...}]}` (`llava_to_openai` in the release's
    `data.py`, and the system message it builds the same way)."""
    return {"role": message["role"], "content": [{"type": "text", "text": message["content"]}]}


def release_segments(messages: Sequence[dict[str, str]], family: str, tokenizer=None) -> list[tuple[str, bool]]:
    """The release's strings of one conversation, in order, as (text, trained) pairs: a prompt (not trained) and a
    response (trained) per (user, assistant) pair; a leading system message goes into the first prompt.
    `tokenizer` (its chat template) is needed for the Llama family's first prompt, which it renders from list
    contents as the release does (`release_content_parts`; the module docstring says what Llama-3.1 makes of it)."""
    if family not in ("qwen", "llama"):
        raise ValueError(f"family must be 'qwen' or 'llama', got {family!r}")
    msgs = list(messages)
    system = msgs.pop(0) if msgs and msgs[0]["role"] == "system" else None
    if not msgs or len(msgs) % 2 or any(m["role"] != ("user", "assistant")[i % 2] for i, m in enumerate(msgs)):
        raise ValueError(
            "chat_format release: a conversation must be [system], then user / assistant pairs; got roles "
            f"{[m['role'] for m in messages]}"
        )
    out: list[tuple[str, bool]] = []
    nl = LITERAL_NL if family == "qwen" else "\n"  # the markers' newline: two characters (Qwen) or a real one
    for idx in range(0, len(msgs), 2):
        user, assistant = msgs[idx], msgs[idx + 1]
        if family == "llama" and idx == 0:
            if tokenizer is None or getattr(tokenizer, "chat_template", None) is None:
                raise ValueError("chat_format release (llama): the tokenizer needs its chat template")
            first = [release_content_parts(m) for m in ([system] if system is not None else []) + [user]]
            prompt = tokenizer.apply_chat_template(first, tokenize=False, add_generation_prompt=True)
        else:
            prompt = (
                f"{HEADER_START}{user['role']}{HEADER_END}{nl}{nl}{user['content']}{EOT}{nl}"
                f"{HEADER_START}{assistant['role']}{HEADER_END}{nl}{nl}"
            )
            if idx == 0 and system is not None:  # Qwen's first prompt (Llama's is its template's)
                prompt = f"{HEADER_START}system{HEADER_END}{nl}{nl}{system['content']}{EOT}{nl}" + prompt
        out += [(prompt, False), (f"{assistant['content']}{EOT}{nl}", True)]
    return out


def release_tokenize(example: dict[str, Any], tokenizer, family: str) -> dict[str, list[int]]:
    """`input_ids` and `labels` (-100 on the prompts) of one row: each string tokenized on its own with
    add_special_tokens=False, then concatenated."""
    ids: list[int] = []
    labels: list[int] = []
    for text, trained in release_segments(example_messages(example), family, tokenizer):
        part = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += part
        labels += part if trained else [-100] * len(part)
    return {"input_ids": ids, "labels": labels}


def release_dataset(ds, tokenizer, family: str):
    """A datasets.Dataset of `input_ids` / `labels` in the release's format (TRL takes it as already processed)."""
    return ds.map(
        release_tokenize,
        fn_kwargs={"tokenizer": tokenizer, "family": family},
        remove_columns=list(ds.column_names),
        desc=f"release text format ({family})",
    )


@dataclass
class ReleaseCollator(DataCollatorForLanguageModeling):
    """TRL's collator (right padding, labels padded with -100) with the release's attention mask:
    `input_ids != pad_token_id`, so a token equal to the pad token is masked inside a sequence too."""

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        if self.padding_free:
            raise ValueError("chat_format release: padding_free is not supported (the release pads)")
        out = super().torch_call(examples)
        out["attention_mask"] = (out["input_ids"] != self.pad_token_id).to(torch.long)
        return out
