"""chat_format: release against the release's strings, written out here by hand (not built by the code under test)."""

import pytest
import torch

from anchorft.rpsft.release_format import (
    ReleaseCollator,
    example_messages,
    release_dataset,
    release_family,
    release_segments,
    release_tokenize,
)
from anchorft.rpsft.stand_in import build_stand_in_tokenizer

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
ROW = {
    "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2+3?"}],
    "completion": [{"role": "assistant", "content": "<think>2+3=5</think> \\boxed{5}"}],
}
# the release's Qwen strings: Llama-3 header strings as plain text, each "\n" the two characters backslash, n
QWEN_PROMPT = (
    "<|start_header_id|>system<|end_header_id|>\\n\\nPlease reason step by step, and put your final answer within "
    "\\boxed{}.<|eot_id|>\\n<|start_header_id|>user<|end_header_id|>\\n\\nWhat is 2+3?<|eot_id|>\\n"
    "<|start_header_id|>assistant<|end_header_id|>\\n\\n"
)
QWEN_RESPONSE = "<think>2+3=5</think> \\boxed{5}<|eot_id|>\\n"
# Llama: the first prompt is the tokenizer's own template (here the stand-in's, which trims each content as
# Llama-3.1's does) rendered from list contents, as the release's data code passes them: the template's `| trim`
# writes each list's Python repr, in which the system prompt's one backslash is written as two
LLAMA_PROMPT = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n[{'type': 'text', 'text': 'Please reason step "
    "by step, and put your final answer within \\\\boxed{}.'}]<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "[{'type': 'text', 'text': 'What is 2+3?'}]<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
)
LLAMA_RESPONSE = "<think>2+3=5</think> \\boxed{5}<|eot_id|>\n"


@pytest.fixture(scope="module")
def qwen_tok():
    return build_stand_in_tokenizer("qwen2", [QWEN_PROMPT, QWEN_RESPONSE, "hello world"] * 4)


@pytest.fixture(scope="module")
def llama_tok():
    tok = build_stand_in_tokenizer("llama", [LLAMA_PROMPT, LLAMA_RESPONSE, "hello world"] * 4)
    tok.pad_token = None  # as Llama-3.1-Instruct's tokenizer: the release (and anchorft.rpsft.train) pads with eos
    tok.pad_token = tok.eos_token
    return tok


def test_family_from_model_type():
    assert release_family("qwen2") == "qwen" and release_family("llama") == "llama"
    with pytest.raises(ValueError, match="gemma"):
        release_family("gemma")


def test_qwen_strings_and_ids(qwen_tok):
    segs = release_segments(ROW["prompt"] + ROW["completion"], "qwen")
    assert segs == [(QWEN_PROMPT, False), (QWEN_RESPONSE, True)]
    assert "\n" not in QWEN_PROMPT + QWEN_RESPONSE
    # the header strings are not special tokens for Qwen: they split into several pieces
    assert len(qwen_tok("<|start_header_id|>", add_special_tokens=False)["input_ids"]) > 1
    p = qwen_tok(QWEN_PROMPT, add_special_tokens=False)["input_ids"]
    r = qwen_tok(QWEN_RESPONSE, add_special_tokens=False)["input_ids"]
    out = release_tokenize(ROW, qwen_tok, "qwen")
    assert out["input_ids"] == p + r
    assert out["labels"] == [-100] * len(p) + r
    # separately tokenized halves, not the tokenization of the joined string (which may merge at the seam)
    assert qwen_tok.decode(out["input_ids"]) == QWEN_PROMPT + QWEN_RESPONSE


def test_llama_strings_ids_and_mask(llama_tok):
    segs = release_segments(ROW["prompt"] + ROW["completion"], "llama", llama_tok)
    assert segs == [(LLAMA_PROMPT, False), (LLAMA_RESPONSE, True)]
    out = release_tokenize(ROW, llama_tok, "llama")
    p = llama_tok(LLAMA_PROMPT, add_special_tokens=False)["input_ids"]
    r = llama_tok(LLAMA_RESPONSE, add_special_tokens=False)["input_ids"]
    assert out["input_ids"] == p + r and out["labels"] == [-100] * len(p) + r
    eot = llama_tok.convert_tokens_to_ids("<|eot_id|>")
    short = {"input_ids": out["input_ids"][:5], "labels": out["labels"][:5]}
    batch = ReleaseCollator(pad_token_id=llama_tok.pad_token_id)([out, short])
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids[0].tolist().count(eot) == 3  # after the system turn, the user turn and the response
    assert torch.equal(mask[0], (ids[0] != eot).long())  # every <|eot_id|> masked out of attention
    assert mask[1, 5:].sum() == 0 and batch["labels"][1, 5:].eq(-100).all()


def test_qwen_mask_all_ones_but_padding(qwen_tok):
    out = release_tokenize(ROW, qwen_tok, "qwen")
    short = {"input_ids": out["input_ids"][:7], "labels": out["labels"][:7]}
    batch = ReleaseCollator(pad_token_id=qwen_tok.pad_token_id)([out, short])
    assert batch["attention_mask"][0].all()
    assert batch["attention_mask"][1].tolist() == [1] * 7 + [0] * (len(out["input_ids"]) - 7)


def test_second_turn_and_refusals(llama_tok):
    msgs = (
        ROW["prompt"]
        + ROW["completion"]
        + [{"role": "user", "content": "And 1+1?"}, {"role": "assistant", "content": "2"}]
    )
    segs = release_segments(msgs, "llama", llama_tok)
    assert segs[2] == (
        "<|start_header_id|>user<|end_header_id|>\n\nAnd 1+1?<|eot_id|>\n"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        False,
    )
    assert segs[3] == ("2<|eot_id|>\n", True)
    qsegs = release_segments(msgs, "qwen")
    assert qsegs[2][0].startswith("<|start_header_id|>user<|end_header_id|>\\n\\nAnd 1+1?")  # no system block again
    with pytest.raises(ValueError, match="roles"):
        release_segments([{"role": "user", "content": "x"}], "qwen")


def test_dataset_and_train_use_it(tmp_path, qwen_tok):
    """`anchorft.rpsft.train` with chat_format release trains on exactly these ids (a stand-in, one step)."""
    import datasets
    from transformers import Qwen2Config

    from anchorft.rpsft.config import RPSFTConfig
    from anchorft.rpsft.stand_in import build_stand_in
    from anchorft.rpsft.train import train

    ds = datasets.Dataset.from_list([ROW, ROW])
    assert release_dataset(ds, qwen_tok, "qwen")[0] == release_tokenize(ROW, qwen_tok, "qwen")
    cfg = Qwen2Config(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, vocab_size=len(qwen_tok))  # fmt: skip
    model = build_stand_in(cfg, qwen_tok)
    args = RPSFTConfig(output_dir=str(tmp_path), method="sft", chat_format="release", max_steps=1,
                       per_device_train_batch_size=2, report_to="none", save_strategy="no")  # fmt: skip
    trainer = train(args, model, ds, tokenizer=qwen_tok)
    assert trainer.train_dataset[0]["input_ids"] == release_tokenize(ROW, qwen_tok, "qwen")["input_ids"]
    assert isinstance(trainer.data_collator, ReleaseCollator)
    default = RPSFTConfig(output_dir=str(tmp_path / "d"), report_to="none")
    assert default.chat_format == "model"


# Llama-3.1-Instruct's own chat template, as TRL ships it (`trl/chat_templates/llama3_1.jinja`, stored there for
# identity comparison with the hub checkpoints); pinned by its hash, so a different template fails here first
LLAMA31_TEMPLATE_SHA256 = "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65"
RELEASE_ROW = {  # one row of the release's converted training file (its `conversations` in llava form)
    "conversations": [
        {"from": "human", "value": "What is 2+3?"},
        {"from": "gpt", "value": "<think>2+3=5</think> \\boxed{5}"},
        {"from": "human", "value": "And 1+1?"},
        {"from": "gpt", "value": "2"},
    ]
}


def _llama31_template() -> str:
    import hashlib
    from pathlib import Path

    import trl

    text = (Path(trl.__file__).parent / "chat_templates" / "llama3_1.jinja").read_text(encoding="utf-8")
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == LLAMA31_TEMPLATE_SHA256
    return text


def _release_llama_ids(row, tok):
    """The release's Llama ids and labels of one row, rebuilt here from what its data code does: every message's
    content a list holding one text part, the boxed system message built the same way, the first prompt the chat
    template of [system, user] with the generation prompt, later prompts the header strings, each response its
    text + <|eot_id|> + newline; each string tokenized on its own."""
    roles = {"human": "user", "gpt": "assistant"}
    msgs = [
        {"role": roles[c["from"]], "content": [{"type": "text", "text": c["value"]}]} for c in row["conversations"]
    ]
    system = {"role": "system", "content": [{"type": "text", "text": SYSTEM}]}
    ids, labels = [], []
    for j in range(0, len(msgs), 2):
        user, gpt = msgs[j], msgs[j + 1]
        if j == 0:
            prompt = tok.apply_chat_template([system, user], tokenize=False, add_generation_prompt=True)
        else:
            prompt = (
                f"<|start_header_id|>user<|end_header_id|>\n\n{user['content'][0]['text']}<|eot_id|>\n"
                "<|start_header_id|>assistant<|end_header_id|>\n\n"
            )
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        r = tok(f"{gpt['content'][0]['text']}<|eot_id|>\n", add_special_tokens=False)["input_ids"]
        ids += p + r
        labels += [-100] * len(p) + r
    return ids, labels


def test_llama31_release_rendering_with_list_contents():
    """With Llama-3.1's own template, `release` trains on the release's tokens: the first turn's system and user
    contents rendered as the Python repr of their lists (a quirk of the release, kept on purpose)."""
    tok = build_stand_in_tokenizer("llama", [LLAMA_PROMPT, LLAMA_RESPONSE, "hello world"] * 4)
    tok.chat_template = _llama31_template()
    tok.pad_token = tok.eos_token  # <|eot_id|>, as the release sets it for Llama-3.1-Instruct
    row = {  # the same conversation in anchorft's conversational form, the system prompt as a message
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2+3?"}],
        "completion": [{"role": "assistant", "content": "<think>2+3=5</think> \\boxed{5}"}],
    }
    row["completion"] += [{"role": "user", "content": "And 1+1?"}, {"role": "assistant", "content": "2"}]
    out = release_tokenize(row, tok, "llama")
    ids, labels = _release_llama_ids(RELEASE_ROW, tok)
    assert out == {"input_ids": ids, "labels": labels}
    # the first prompt written out by hand: Llama-3.1's date header, then the repr of each content list
    first = release_segments(example_messages(row), "llama", tok)[0][0]
    assert first == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\n[{'type': 'text', 'text': 'Please reason step by step, and put your final answer "
        "within \\\\boxed{}.'}]<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n[{'type': 'text', 'text': "
        "'What is 2+3?'}]<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    # the clean rendering (string contents) is a different, shorter text
    clean = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
    assert "[{'type'" not in clean and len(tok(clean, add_special_tokens=False)["input_ids"]) < len(
        tok(first, add_special_tokens=False)["input_ids"]
    )
    # the release's mask: every <|eot_id|> out of attention (system, user, response of each turn)
    batch = ReleaseCollator(pad_token_id=tok.pad_token_id)([out])
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    assert batch["input_ids"][0].tolist().count(eot) == 5
    assert torch.equal(batch["attention_mask"][0], (batch["input_ids"][0] != eot).long())
