"""Our KV-cache decoding loop against transformers' own generate (greedy, left-padded batches)."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from anchorft.eval.hf_backend import generate


def test_greedy_matches_transformers_generate(char_tokenizer):
    tok = char_tokenizer
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)  # test-only: the model's random init
    model = LlamaForCausalLM(cfg).eval()
    prompts = ["ab+c", "hello world", "7"]
    ours = generate(model, tok, prompts, max_new_tokens=8, batch_size=3)
    for prompt, (completion,) in zip(prompts, ours):
        ids = tok(prompt, return_tensors="pt")
        ref = model.generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
        expected = tok.decode(ref[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        assert completion == expected
