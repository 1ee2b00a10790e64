"""Loading and checking fine-tuning data and tokenizers for `anchorft.rpsft.train`."""

from __future__ import annotations

import json
import os

import datasets

from anchorft.errors import UsageError
from anchorft.preflight import check_input_file, looks_like_path

__all__ = ["load_sft_dataset", "check_sft_source", "validate_sft_dataset"]

_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def load_sft_dataset(
    spec: datasets.Dataset | str, split: str = "train", field: str = "train_dataset"
) -> datasets.Dataset:
    """A Dataset from a Dataset, a local .jsonl / .json / .parquet file, a `save_to_disk` folder, or a hub name."""
    if isinstance(spec, datasets.Dataset):
        return spec
    if isinstance(spec, datasets.DatasetDict):
        if split not in spec:
            raise ValueError(f"{field}: DatasetDict has no split {split!r} (splits: {list(spec)})")
        return spec[split]
    if not isinstance(spec, (str, os.PathLike)):
        raise ValueError(f"{field} must be a datasets.Dataset or a path / hub name, got {type(spec).__name__}")
    path = os.fspath(spec)
    ext = os.path.splitext(path)[1].lower()
    if os.path.isfile(path):
        if ext not in _FILE_BUILDERS:
            raise ValueError(f"{field}: unsupported file type {ext!r} ({path}); use .jsonl, .json or .parquet")
        return datasets.load_dataset(_FILE_BUILDERS[ext], data_files=path, split="train")
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "dataset_info.json")):
        return load_sft_dataset(datasets.load_from_disk(path), split, field)
    if ext in _FILE_BUILDERS or path.startswith(("/", "./", "../", "~")) or path.count("/") > 1:
        raise ValueError(f"{field}: {path!r} not found (expected a local file / folder or a hub name)")
    return datasets.load_dataset(path, split=split)


def check_sft_source(spec: str | os.PathLike | None, flag: str = "--dataset") -> None:
    """Before loading anything: a local file exists and, for .jsonl, every line is a JSON object (file and line
    named); a path-like name that does not exist is an error; a hub name is left to `load_sft_dataset`."""
    if spec is None or not isinstance(spec, (str, os.PathLike)):
        return
    path = os.fspath(spec)
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "dataset_info.json")):
            raise UsageError(f"{flag}: {path} is a folder without dataset_info.json (not a save_to_disk dataset)")
        return
    if os.path.exists(path) or looks_like_path(path) or os.path.splitext(path)[1].lower() in _FILE_BUILDERS:
        check_input_file(path, flag)
        if path.lower().endswith(".jsonl"):  # the columns of the first row (data of another schema named now)
            with open(path, encoding="utf-8") as f:
                first = next(json.loads(line) for line in f if line.strip())
            validate_sft_dataset(datasets.Dataset.from_list([first]), None, field=f"{flag} {path}")


def validate_sft_dataset(ds: datasets.Dataset, tokenizer=None, field: str = "train_dataset") -> str:
    """Check the columns: 'prompt' + 'completion', or 'messages'. Returns the form ("prompt_completion",
    "conversational_prompt_completion" or "messages"). Conversational data needs a chat template."""
    cols = set(ds.column_names)
    if len(ds) == 0:
        raise ValueError(f"{field} is empty")
    if {"prompt", "completion"} <= cols:
        first = ds[0]
        for c in ("prompt", "completion"):
            v = first[c]
            if not isinstance(v, (str, list)):
                raise ValueError(f"{field}: column {c!r} must hold strings or message lists, got {type(v).__name__}")
        form = "conversational_prompt_completion" if isinstance(first["prompt"], list) else "prompt_completion"
    elif "messages" in cols:
        first = ds[0]["messages"]
        if not (isinstance(first, list) and first and isinstance(first[0], dict) and "role" in first[0]):
            raise ValueError(f"{field}: column 'messages' must hold lists of {{'role', 'content'}} dicts")
        form = "messages"
    else:
        hint = "; convert it first: anchorft data openr1-math --source FILE --out DIR" if "target" in cols else ""
        raise ValueError(
            f"{field} must have columns 'prompt' and 'completion', or 'messages'; it has {sorted(cols)}{hint}"
        )
    if form != "prompt_completion" and tokenizer is not None and getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(f"{field} is conversational ({form}) but the tokenizer has no chat_template")
    return form
