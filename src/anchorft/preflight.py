"""Checks a command runs before it loads anything: the model can be found, the input files are readable.

`check_model_source` fails in well under a second, instead of after transformers' network retries
(about 40 s without network), when a model is neither a local folder nor in the hub cache and the hub
cannot be reached (or HF_HUB_OFFLINE=1). `check_input_file` names the flag and, for JSONL, the file
and line of a malformed row (anchorft.errors.check_jsonl).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

from anchorft.errors import UsageError, check_jsonl

__all__ = [
    "check_model_source",
    "resolve_model_folder",
    "DOWNLOAD_PATTERNS",
    "download_selection",
    "missing_shards",
    "check_input_file",
    "looks_like_path",
    "hub_reachable",
    "check_hub_dataset",
    "check_eval_spec",
    "WEIGHT_FILES",
    "check_model_folder",
]


def looks_like_path(spec: str) -> bool:
    """True for what can only be a local path: it starts with /, ./, ../ or ~, has 2+ slashes, or a file suffix."""
    return spec.startswith(("/", "./", "../", "~", ".\\")) or spec.count("/") > 1 or spec.endswith("/")


def _offline() -> bool:
    flags = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on") for k in flags)


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the hub's endpoint ($HF_ENDPOINT, else huggingface.co:443) opens in `timeout` s."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout):
            return True
    except OSError:
        return False


def check_model_source(spec: str | os.PathLike | None, flag: str = "--model", what: str = "model") -> None:
    """A local folder with config.json, a hub name in the local cache, or a hub name with the hub reachable.

    Anything else is a UsageError naming `flag`. A non-string (an already built model) is accepted.
    """
    if spec is None or not isinstance(spec, (str, os.PathLike)):
        return
    spec = os.fspath(spec)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file() and what == "model":
            raise UsageError(f"{flag}: {spec} is a folder without config.json (not a saved model)")
        return
    if path.exists():
        raise UsageError(f"{flag}: {spec} is a file; expected a model folder or a hub name")
    if looks_like_path(spec):
        raise UsageError(f"{flag}: {spec} does not exist")
    try:
        # lazy: huggingface_hub reads HF_HUB_OFFLINE and its cache paths when first imported
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(spec, "config.json" if what == "model" else "tokenizer_config.json")
    except Exception:  # an invalid repo id, e.g. with characters the hub refuses
        raise UsageError(f"{flag}: {spec!r} is neither a local folder nor a valid hub name") from None
    if isinstance(cached, str):
        return
    if _offline():
        raise UsageError(f"{flag}: {spec} is not a local folder and not in the hub cache (HF_HUB_OFFLINE is set)")
    if not hub_reachable():
        raise UsageError(
            f"{flag}: {spec} is not a local folder, not in the hub cache, and the hub cannot be reached "
            "(no network?); download it first or pass a local folder"
        )


def resolve_model_folder(spec: str | os.PathLike, flag: str = "--model") -> str:
    """A local folder for `spec`: the folder itself, or a hub id's snapshot in the hub cache (downloaded first when
    the hub can be reached: config, weights and tokenizer files only). Offline and not cached: a one-line
    UsageError naming `flag`, the id and HF_HUB_OFFLINE (`check_model_source`)."""
    spec = os.fspath(spec)
    if Path(spec).expanduser().is_dir() or looks_like_path(spec):
        return str(Path(spec).expanduser())
    check_model_source(spec, flag)
    # lazy: huggingface_hub reads HF_HUB_OFFLINE and its cache paths when first imported
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(
            spec, allow_patterns=list(DOWNLOAD_PATTERNS), local_files_only=_offline() or not hub_reachable()
        )
    except Exception as e:  # a gated or missing repo, or a cache without a snapshot: one line naming the id
        raise UsageError(f"{flag}: {spec}: could not get the hub model ({type(e).__name__}: {e})") from None
    if missing := missing_shards(folder):
        raise UsageError(f"{flag}: {spec}: the download lacks {len(missing)} weight shard(s), first {missing[0]}")
    return folder


# what resolve_model_folder fetches of a hub model: config, safetensors weights (every shard and the index),
# tokenizer and chat template files; not pickled .bin weights, not the original/ checkpoints some repos add
DOWNLOAD_PATTERNS = ("*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt", "*.jinja")


def download_selection(files: list[str]) -> list[str]:
    """The files of a hub repo listing that resolve_model_folder downloads: DOWNLOAD_PATTERNS applied by the filter
    snapshot_download itself uses (huggingface_hub's filter_repo_objects)."""
    # lazy: huggingface_hub reads HF_HUB_OFFLINE and its cache paths when first imported
    from huggingface_hub.utils import filter_repo_objects

    return list(filter_repo_objects(files, allow_patterns=list(DOWNLOAD_PATTERNS)))


def missing_shards(folder: str | os.PathLike) -> list[str]:
    """The shards that `folder`'s model.safetensors.index.json names but the folder lacks ([] without an index)."""
    index = Path(folder) / "model.safetensors.index.json"
    if not index.is_file():
        return []
    shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
    return [s for s in shards if not (Path(folder) / s).is_file()]


def check_input_file(path: str | os.PathLike | None, flag: str, jsonl: bool | None = None) -> None:
    """`path` exists and is a file; a .jsonl file (or `jsonl=True`) must hold JSON objects, one a line."""
    if path is None:
        return
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{flag}: {path} does not exist")
    if p.is_dir():
        raise UsageError(f"{flag}: {path} is a folder; expected a file")
    if not os.access(p, os.R_OK):
        raise UsageError(f"{flag}: {path} is not readable")
    if jsonl or (jsonl is None and p.suffix.lower() == ".jsonl"):
        check_jsonl(p, what=flag)


def _dataset_cached(name: str) -> bool:
    """Whether the hub dataset `name` has a copy in the local caches (the hub's download cache or datasets')."""
    # lazy: huggingface_hub reads HF_HUB_OFFLINE and its cache paths when first imported
    from huggingface_hub.constants import HF_HUB_CACHE

    hub = Path(HF_HUB_CACHE) / f"datasets--{name.replace('/', '--')}"
    sets = Path(os.environ.get("HF_DATASETS_CACHE") or Path(HF_HUB_CACHE).parent / "datasets")
    return hub.is_dir() or (sets / name.replace("/", "___")).is_dir()


def _go_offline() -> None:
    """Make the hub libraries use their caches only (no connection attempts and their retries)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    for module, attr in (("huggingface_hub.constants", "HF_HUB_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE")):
        if module in sys.modules:
            setattr(sys.modules[module], attr, True)


def check_hub_dataset(source: str, flag: str = "--source") -> None:
    """A hub dataset name is usable: the hub can be reached, or the set is in the local cache (then the hub
    libraries are switched to offline mode, so that they read it without retrying the network). Otherwise a
    UsageError naming `flag`, the offline alternative (a local file or folder)."""
    offline = _offline()
    if not offline and hub_reachable():
        return
    why = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached (no network?)"
    if not _dataset_cached(source):
        raise UsageError(
            f"{flag}: {source} is a hub dataset, not in the local cache, and {why}; download it where there is "
            f"network, or pass {flag} PATH (a local .jsonl, .parquet or folder)"
        )
    _go_offline()


def check_eval_spec(spec: dict) -> None:
    """`anchorft eval`'s settings checked before anything loads: --bench files or --lm-eval tasks (one of the two),
    k within 1..n, the model source, the benchmark files."""
    if bool(spec["bench"]) == bool(spec["lm_eval"]):
        raise UsageError("give --bench FILE.jsonl (one or more) or --lm-eval TASKS")
    if spec["k"] is not None and spec["bench"] and not 1 <= spec["k"] <= spec["n"]:
        raise ValueError(f"--k: must be in 1..--n ({spec['n']}), got {spec['k']}")
    check_model_source(spec["model"], "--model")
    for b in spec["bench"]:
        check_input_file(b, "--bench", jsonl=False)


WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def check_model_folder(spec: str | os.PathLike, field: str = "model") -> None:
    """One-line ValueError for a local model folder that holds no weights (checked before anything is loaded).

    A hub name (no such local folder) is left to `from_pretrained`."""
    path = os.fspath(spec)
    if not os.path.isdir(path):
        return
    names = set(os.listdir(path))
    if not names & set(WEIGHT_FILES) and not any(n.endswith(".safetensors") for n in names):
        has = "config.json only" if "config.json" in names else f"{len(names)} file(s), no config.json"
        raise ValueError(
            f"{field}: {path} holds no weights ({has}; expected one of {list(WEIGHT_FILES)}); "
            "pass the folder a model was saved to, or a hub name"
        )
