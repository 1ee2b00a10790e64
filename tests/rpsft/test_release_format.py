"""chat_format: release against the release's strings, written out here by hand (not built by the code under test)."""

import pytest
import torch

from anchorft.rpsft.release_format import (
    ReleaseCollator,
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
# Llama: the first prompt is the tokenizer's own template (here the stand-in's), the response ends in a real newline
LLAMA_PROMPT = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nPlease reason step by step, and put your final "
    "answer within \\boxed{}.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+3?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
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
