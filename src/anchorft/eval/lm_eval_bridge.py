"""Bridge to lm-evaluation-harness (optional extra `lmeval`): run its tasks on a local model.

Tasks are lm-eval task names, or paths to task YAML files (their folder becomes an include path and
the task name is read from the file). When every asked task is found in the include paths, the
harness's built-in task index (thousands of YAML files) is not built: TaskManager(include_path=...,
include_defaults=False). Datasets of built-in tasks come from the Hub, so on a machine without
network only custom tasks whose data are local files (e.g. `dataset_path: json`,
`dataset_kwargs: {data_files: ...}`) can run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import yaml

from anchorft.errors import MissingExtra
from anchorft.io import write_json
from anchorft.provenance import with_provenance

__all__ = ["lm_eval_available", "resolve_tasks", "run_lm_eval"]


def lm_eval_available() -> bool:
    return importlib.util.find_spec("lm_eval") is not None


def _task_name(yaml_path: Path) -> str:
    class _Loader(yaml.SafeLoader):  # lm-eval YAMLs use !function tags: read them as plain strings
        pass

    _Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    with yaml_path.open(encoding="utf-8") as fh:
        cfg = yaml.load(fh, Loader=_Loader)
    name = cfg.get("task") if isinstance(cfg, dict) else None
    if not isinstance(name, str):
        raise ValueError(f"{yaml_path}: no 'task' name in this task YAML")
    return name


def resolve_tasks(tasks: Sequence[str], include_path: Sequence[str | Path] = ()) -> tuple[list[str], list[str]]:
    """Split TASKS (names or YAML paths) into (task names, include paths)."""
    names: list[str] = []
    paths = [str(p) for p in include_path]
    for t in tasks:
        t = t.strip()
        if not t:
            continue
        p = Path(t)
        if p.suffix in (".yaml", ".yml"):
            if not p.is_file():
                raise ValueError(f"--lm-eval: task file {p} does not exist")
            names.append(_task_name(p))
            if str(p.parent) not in paths:
                paths.append(str(p.parent))
        else:
            names.append(t)
    if not names:
        raise ValueError("--lm-eval: no task given")
    for p in paths:
        if not Path(p).is_dir():
            raise ValueError(f"--include-path {p} is not a directory")
    return names, paths


def run_lm_eval(
    model_dir: str | Path,
    tasks: Sequence[str],
    out_dir: str | Path,
    *,
    include_path: Sequence[str | Path] = (),
    limit: int | float | None = None,
    batch_size: int = 8,
    num_fewshot: int | None = None,
    apply_chat_template: bool = False,
    device: str | None = None,
    seed: int = 0,
) -> dict:
    """Evaluate a local HF model on lm-eval tasks; writes out_dir/lm_eval_results.json, returns its dict."""
    if not lm_eval_available():
        raise MissingExtra("the lm-eval bridge needs lm-evaluation-harness: pip install 'anchorft[lmeval]'")
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ValueError(f"--model {model_dir}: no config.json there (a local model directory is needed)")
    names, paths = resolve_tasks(tasks, include_path)

    import lm_eval  # lazy: the lmeval extra
    import torch  # lazy: loads torch
    from lm_eval.tasks import TaskManager  # lazy: loads datasets (and pyarrow)

    tm, builtin_index = None, False
    if paths:
        tm = TaskManager(include_path=paths, include_defaults=False)
        if not all(n in tm.all_tasks for n in names):
            tm = None  # some built-in task is asked: index the defaults too
    if tm is None:
        tm, builtin_index = TaskManager(include_path=paths or None), True
    missing = [n for n in names if n not in tm.all_tasks]
    if missing:
        raise ValueError(f"--lm-eval: unknown task(s) {missing}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = "bfloat16" if device.startswith("cuda") else "float32"
    results = lm_eval.simple_evaluate(
        model="hf",
        model_args={"pretrained": str(model_dir), "dtype": dtype, "trust_remote_code": False},
        tasks=names,
        task_manager=tm,
        limit=limit,
        batch_size=batch_size,
        num_fewshot=num_fewshot,
        device=device,
        apply_chat_template=apply_chat_template,
        log_samples=False,
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
    )
    out = {
        "model": str(model_dir),
        "tasks": names,
        "include_path": paths,
        "builtin_index": builtin_index,
        "results": results["results"],
        "n_samples": results.get("n-samples"),
        "versions": results.get("versions"),
    }
    write_json(Path(out_dir) / "lm_eval_results.json", with_provenance(out), indent=2, default=str)
    return out
