"""What `resolve_model_folder` downloads of a hub model, tested offline on file listings: every safetensors shard of a
sharded checkpoint with its index, config and tokenizer, no pickled weights; and a folder whose index names a shard it
lacks is refused in one line."""

from __future__ import annotations

import json

import pytest

from anchorft.errors import UsageError
from anchorft.preflight import download_selection, missing_shards, resolve_model_folder

# the file listing of a sharded hub checkpoint (the layout save_pretrained and the hub's Llama / Qwen repos use)
SHARDED = [
    ".gitattributes",
    "LICENSE",
    "README.md",
    "config.json",
    "generation_config.json",
    "model-00001-of-00003.safetensors",
    "model-00002-of-00003.safetensors",
    "model-00003-of-00003.safetensors",
    "model.safetensors.index.json",
    "original/consolidated.00.pth",
    "original/params.json",
    "pytorch_model-00001-of-00002.bin",
    "pytorch_model-00002-of-00002.bin",
    "pytorch_model.bin.index.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "merges.txt",
    "vocab.json",
]


def test_a_sharded_checkpoint_is_fetched_whole_without_pickles():
    got = set(download_selection(SHARDED))
    shards = {f for f in SHARDED if f.startswith("model-")}
    assert shards | {"model.safetensors.index.json", "config.json", "tokenizer.json", "tokenizer_config.json"} <= got
    assert {"chat_template.jinja", "generation_config.json", "special_tokens_map.json"} <= got
    assert not {f for f in got if f.endswith((".bin", ".pth"))}


def test_a_single_file_checkpoint_is_fetched():
    assert "model.safetensors" in download_selection(["config.json", "model.safetensors", "tokenizer.json"])


def test_a_folder_missing_a_shard_its_index_names_is_refused(tmp_path, monkeypatch):
    index = {"metadata": {}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                                            "b.weight": "model-00002-of-00002.safetensors"}}  # fmt: skip
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"")
    assert missing_shards(tmp_path) == ["model-00002-of-00002.safetensors"]
    import huggingface_hub

    import anchorft.preflight as pf

    monkeypatch.setattr(pf, "check_model_source", lambda spec, flag: None)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: str(tmp_path))
    with pytest.raises(UsageError, match="lacks 1 weight shard.*model-00002-of-00002") as e:
        resolve_model_folder("org/sharded-model")
    assert "\n" not in str(e.value)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"")
    assert missing_shards(tmp_path) == [] and resolve_model_folder("org/sharded-model") == str(tmp_path)
