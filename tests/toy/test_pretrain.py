"""Packing in pretraining: a packed batch computes what the documents compute one per row."""

import dataclasses

import numpy as np
import pytest
import torch

from anchorft.studies.testbed.compare_config import load_config
from anchorft.toy.pretrain import PretrainConfig, _batch, build_model, build_tokenizer


@pytest.fixture(scope="module")
def tiny():
    cfg = PretrainConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, batch_size=4, pack_len=64)
    tok = build_tokenizer(np.random.default_rng(0))
    model = build_model(cfg, len(tok), tok, seed=0).eval()
    return cfg, tok, model


def test_packed_batch_matches_one_document_per_row(tiny):
    cfg, tok, model = tiny
    ids, labels, pos, mask = _batch(cfg, tok, np.random.default_rng(3))
    assert ids.shape == (4, 64) and mask.shape == (4, 1, 64, 64)
    assert (ids != tok.pad_token_id).sum() > 0.6 * ids.numel()  # packing fills the rows
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=pos, attention_mask=mask).logits  # (B, T, V)
        n_docs = 0
        for r in range(ids.shape[0]):
            c = 0
            while c < ids.shape[1] and ids[r, c] == tok.bos_token_id:
                n = int((pos[r, c:] == torch.arange(ids.shape[1] - c)).long().cumprod(0).sum())  # run of 0,1,2..
                alone = model(input_ids=ids[r : r + 1, c : c + n]).logits[0]  # the document on its own
                torch.testing.assert_close(packed[r, c : c + n], alone, atol=1e-5, rtol=1e-5)
                c, n_docs = c + n, n_docs + 1
        assert n_docs > 4  # several documents per row


def test_first_fit_packing_trains_every_document_drawn(tiny):
    """Over several steps, the documents packed plus those still waiting are exactly the documents drawn from
    the mixture (the same rng stream, drawn here independently): none lost, none repeated, so the mixture
    is not tilted toward the short documents that fit more easily."""
    from anchorft.toy.pretrain import _documents, _encode_docs

    _, tok, _ = tiny
    cfg = PretrainConfig(batch_size=6, pack_len=40)
    rng, carry, packed = np.random.default_rng(5), [], []
    fills = []
    for _ in range(12):
        ids, _, pos, _ = _batch(cfg, tok, rng, carry)
        fills.append(float((ids != tok.pad_token_id).float().mean()))
        for r in range(ids.shape[0]):  # split each row at the documents' starts (position 0) to recover them
            starts = [c for c in range(ids.shape[1]) if pos[r, c] == 0 and ids[r, c] != tok.pad_token_id]
            ends = starts[1:] + [int((ids[r] != tok.pad_token_id).sum())]
            packed += [tuple(ids[r, a:b].tolist()) for a, b in zip(starts, ends)]
        assert len(carry) < 64 + 8  # the queue stays bounded
    left = [tuple(d) for d, _ in carry]
    ref = np.random.default_rng(5)
    drawn = []
    while len(drawn) < len(packed) + len(left):  # the same stream, in the chunks of 64 that _batch draws
        drawn += [tuple(d) for d, _ in _encode_docs(_documents(cfg.mix, 64, ref), tok, cfg.loss_on)]
    assert sorted(packed + left) == sorted(drawn)
    assert np.mean(fills) > 0.85  # first-fit: closing a row at the first misfit left these rows ~80 % full


def test_labels_mask_prompt_and_padding(tiny):
    cfg, tok, _ = tiny
    ids, labels, pos, _ = _batch(cfg, tok, np.random.default_rng(4))
    assert (labels[ids == tok.pad_token_id] == -100).all()
    assert (labels[ids == tok.bos_token_id] == -100).all()
    eos = ids == tok.eos_token_id
    assert (labels[eos] == tok.eos_token_id).all()  # the answer's end is learnt
    # unpacked mode: one document per row, no mask
    ids0, labels0, pos0, mask0 = _batch(PretrainConfig(batch_size=3, pack_len=0), tok, np.random.default_rng(4))
    assert ids0.shape[0] == 3 and pos0 is None and mask0 is None


def test_pack_len_too_small_is_an_error():
    with pytest.raises(ValueError, match="pack_len"):
        PretrainConfig(pack_len=20).validate()


def test_cache_key_changes_with_the_corpus_version(monkeypatch):
    import anchorft.toy.pretrain as pretrain

    key = PretrainConfig().key()
    assert PretrainConfig(eval_every=100).key() == key  # logging only
    monkeypatch.setattr(pretrain, "CORPUS_VERSION", pretrain.CORPUS_VERSION + 1)
    assert PretrainConfig().key() != key  # a model built from other documents or tokens is not reused


def test_cache_key_changes_with_the_package_version(monkeypatch):
    import anchorft
    import anchorft.toy.pretrain as pretrain

    key, cv = PretrainConfig().key(), pretrain.code_version()
    assert cv == f"{anchorft.__version__}+corpus{pretrain.CORPUS_VERSION}"
    monkeypatch.setattr(anchorft, "__version__", anchorft.__version__ + ".post1")
    assert PretrainConfig().key() != key and pretrain.code_version() != cv


def test_cached_model_of_other_code_is_not_reused(tmp_path, monkeypatch):
    """A complete cache entry written under the key of another corpus or release is never found for this code."""
    import anchorft
    import anchorft.toy.pretrain as pretrain

    monkeypatch.setenv("ANCHORFT_CACHE", str(tmp_path))
    cfg = PretrainConfig(steps=1)
    entry = tmp_path / "toy" / cfg.key()
    entry.mkdir(parents=True)
    (entry / "metrics.json").write_text("{}")
    (entry / "model.safetensors").write_text("")
    assert pretrain.cached_model(cfg) == entry
    monkeypatch.setattr(pretrain, "CORPUS_VERSION", pretrain.CORPUS_VERSION + 1)
    assert pretrain.cached_model(cfg) is None
    monkeypatch.undo()
    monkeypatch.setenv("ANCHORFT_CACHE", str(tmp_path))
    monkeypatch.setattr(anchorft, "__version__", "99.0")
    assert pretrain.cached_model(cfg) is None


def test_cli_pretrain_seed_and_steps_override_the_preset(tmp_path, monkeypatch, capsys):
    """`anchorft toy pretrain --seed S --steps N` pretrains that config (its own cache entry), not the preset's."""
    import json

    from safetensors.torch import load_file

    from anchorft.cli import main as cli

    monkeypatch.setenv("ANCHORFT_CACHE", str(tmp_path / "cache"))
    torch.set_num_threads(1)
    for seed in (0, 1):
        argv = ["toy", "pretrain", "--preset", "smoke", "--steps", "3", "--seed", str(seed)]
        assert cli([*argv, "--out", str(tmp_path / f"s{seed}")]) == 0
    assert "greedy accuracy:" in capsys.readouterr().out
    cfgs = [json.loads((tmp_path / f"s{s}" / "pretrain_config.json").read_text()) for s in (0, 1)]
    assert [c["seed"] for c in cfgs] == [0, 1] and [c["steps"] for c in cfgs] == [3, 3]
    assert len(list((tmp_path / "cache").rglob("model.safetensors"))) == 2  # one cache entry per seed
    w0, w1 = (load_file(tmp_path / f"s{s}" / "model.safetensors") for s in (0, 1))
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)


@pytest.mark.parametrize("outside", [1, 3])
def test_pretraining_runs_on_its_configured_threads(tmp_path, monkeypatch, outside):
    """Every pretraining step runs on cfg.threads torch threads, whatever the caller's count (the weights depend on
    it), and the caller's count is put back; the count is part of the cache key."""
    from anchorft.toy import pretrain as pt

    seen = []
    real = pt._batch

    def spy(*a, **k):
        seen.append(torch.get_num_threads())
        return real(*a, **k)

    monkeypatch.setattr(pt, "_batch", spy)
    cfg = dataclasses.replace(load_config("smoke").pretrain, steps=2, eval_items=1, threads=2)
    before = torch.get_num_threads()
    torch.set_num_threads(outside)
    try:
        pt.pretrain(cfg, tmp_path / "m", progress=False)
        assert torch.get_num_threads() == outside
    finally:
        torch.set_num_threads(before)
    assert seen == [2, 2]
    assert dataclasses.replace(cfg, threads=1).key() != cfg.key()
    with pytest.raises(ValueError, match="threads"):
        dataclasses.replace(cfg, threads=0).validate()
