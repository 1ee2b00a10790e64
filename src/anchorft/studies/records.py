"""The records the docs report, and the docs' tables rendered from them (`make docs-tables`).

A record is one JSON file, `records/NAME.json`: a study's results without its models, with what made them: the
command, the git commit (and whether the tree was dirty), the thread counts, the testbed's cache keys, when, and
the drift alarm's replay (`anchorft.studies.drift`). The per-item grades of a study, when kept, are the study
records beside them (`records/verdict/`, `anchorft toy pack`).

Each table of README.md and docs/**/*.md that reports a record's numbers stands between marker comments,

    <!-- table: NAME -->
    ...
    <!-- /table -->

and `python -m anchorft.studies.records tables` rewrites every such block from `TABLES[NAME]`'s renderer and its
record; `--check` says which differ (the test `test_docs_tables_match_records` does the same). `make` a record
from a finished run folder; `check` replays every record (the drift alarm, `make drift`); `replay-again` makes the
training replays again on a new CPU kind where they agree with the stored ones (anchorft.studies.drift).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from anchorft.io import write_json, write_text
from anchorft.w2s.stats import mean_t_interval

__all__ = [
    "FORMAT",
    "TABLES",
    "repo_root",
    "load_record",
    "make_toy_record",
    "make_w2s_record",
    "make_race_record",
    "make_scaling_record",
    "make_chi_record",
    "make_rho_star_record",
    "make_verdict_record",
    "render",
    "blocks",
    "doc_files",
    "stale_tables",
    "rewrite_tables",
    "replay",
    "check_records",
    "main",
]

FORMAT = "anchorft-record/1"
BLOCK = re.compile(r"<!-- table: (?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- /table -->", re.S)


def repo_root() -> Path:
    """The checkout this module lives in (records/ and docs/ are the checkout's, not an installed package's)."""
    return Path(__file__).resolve().parents[3]


def load_record(name: str, root: str | Path | None = None) -> dict:
    """records/NAME.json of the checkout `root`."""
    path = Path(root or repo_root()) / "records" / f"{name}.json"
    rec = json.loads(path.read_text(encoding="utf-8"))
    if rec.get("format") != FORMAT:
        raise ValueError(f"{path}: not a record (format {rec.get('format')!r}, expected {FORMAT!r})")
    return rec


def _meta(name: str, command: str, provenance: dict | None, threads: dict, cache_keys: dict, **more) -> dict:
    prov = provenance or {}
    return {
        "format": FORMAT,
        "name": name,
        "command": command,
        "commit": prov.get("git_commit"),
        "dirty": prov.get("git_dirty"),
        "versions": {k: prov[k] for k in ("anchorft", "torch", "transformers", "trl", "peft") if k in prov},
        "threads": threads,
        "cache_keys": cache_keys,
        "made": datetime.date.today().isoformat(),
        **more,
    }


def _results_without_paths(results: dict) -> dict:
    out = json.loads(json.dumps(results))
    out.get("settings", {}).pop("pretrained", None)  # a machine's cache path; the key is in cache_keys
    return out


def make_toy_record(name: str, folder: str | Path, command: str, finetune_replay: bool = True, **more) -> dict:
    """The record of a finished `toy compare` folder (one base, or a study of `bases:` with a base-seedB folder
    each): every base's results.json without models, the config, the command, commit, thread counts and cache keys,
    and the replay of its (first) base; `more` (e.g. timings) stored beside."""
    from anchorft.studies import drift
    from anchorft.studies.testbed.layout import base_folders
    from anchorft.studies.testbed.results import load_results

    folder = Path(folder)
    bases = base_folders(folder) or {None: folder}
    results = {}
    for b, sub in sorted(bases.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        res = load_results(sub / "results.json").to_dict()
        results["single" if b is None else str(b)] = res
    config = yaml.safe_load((next(iter(sorted(bases.values()))) / "config.yaml").read_text())
    first = next(iter(results.values()))
    keys = {str(r["settings"].get("pretrain_seed", k)): r["base"]["pretrain"]["key"] for k, r in results.items()}
    threads = {"pretrain": config["pretrain"]["threads"], "finetune": config["threads"]}
    rec = _meta(name, command, first.get("provenance"), threads, keys, **more)
    rec["config"] = config
    rec["results"] = {k: _results_without_paths(v) for k, v in results.items()}
    rec["replay"] = {"toy": drift.toy_replay(config) if finetune_replay else _pretrain_only(config)}
    return rec


def _pretrain_only(config: dict) -> dict:
    from anchorft.studies import drift

    one = {**config, "runs": config["runs"][:1]}
    got = drift.toy_replay(one)
    return {k: got[k] for k in ("pretrain", "machine")}


def make_w2s_record(name: str, folder: str | Path, command: str, threads: int | None = None, **more) -> dict:
    """The record of a finished `w2s run` folder: its metrics.json (curves dropped: the per-seed finals kept), the
    resolved config, the command, commit and thread count, and the replay (one seed at a short budget). A `w2s
    replicate` folder gives its run's record with the replication (replication.json) under "replication"."""
    from anchorft.studies import drift

    folder = Path(folder)
    if (folder / "replication.json").is_file():  # an `anchorft w2s replicate` folder: its run, and its verdict
        more = {"replication": json.loads((folder / "replication.json").read_text()), **more}
        folder = folder / "run"
    metrics = json.loads((folder / "metrics.json").read_text())
    config = metrics.get("config") or yaml.safe_load((folder / "config.yaml").read_text())
    threads = threads or metrics["torch_threads"]
    rec = _meta(name, command, metrics.get("provenance"), {"torch": threads}, {}, **more)
    rec["config"] = config
    rec["results"] = {
        m: {k: metrics[m][k] for k in ("init", "final", "final_per_seed")} for m in config["modes"] if m in metrics
    }
    if "risks" in metrics:  # the risks' summaries (per seed, se, the gain over the teacher), no per-sample data
        keep = ("risk", "risk_se", "risk_per_seed", "gain_over_weak", "gain_over_weak_se", "surpasses_teacher")
        rec["results"]["risks"] = {
            dist: {k: metrics["risks"][dist][k] for k in keep} for dist in ("isotropic", "generative")
        }
    if isinstance((metrics.get("ode") or {}).get("w2s"), dict) and "escape_ratio" in metrics["ode"]["w2s"]:
        ode = metrics["ode"]["w2s"]  # the mean-field ODE's escape against the simulation's (`w2s run --ode`)
        keep = ("escape_ratio", "escape_samples_per_seed", "escape_samples_measured")
        rec["results"]["ode"] = {"w2s": {k: ode[k] for k in keep}}
    rec["replay"] = {"w2s": drift.w2s_replay(config, threads)}
    return rec


def make_race_record(name: str, folder: str | Path, command: str, **more) -> dict:
    """The record of a finished `w2s sweep --kind race` folder: its rows (each cell's chosen step, the grid, the
    seeds' own fastest steps, the medians and per-seed times) and its sweep file, without the points' curves; the
    replay is one seed of the race's first size, both modes, at a short budget."""
    from anchorft.studies import drift
    from anchorft.w2s.config import load_config

    res = json.loads((Path(folder) / "results.json").read_text())
    spec = {k: v for k, v in res["spec"].items() if k != "points"}
    base = dict(spec["base"])
    d, s_ = spec["sizes"][0]
    config = load_config(base.pop("preset"), {**base, "d": d, "s": s_, "modes": ["w2s", "sft"]}).to_dict()
    rec = _meta(name, command, res.get("provenance"), {"torch": 1}, {}, **more)
    rec["config"], rec["spec"], rec["results"] = config, spec, {"rows": res["rows"]}
    rec["replay"] = {"w2s": drift.w2s_replay(config, 1)}
    return rec


def make_scaling_record(name: str, folder: str | Path, command: str, **more) -> dict:
    """The record of a finished scaling sweep with a step grid (`w2s sweep --kind d-scaling`): per point and series,
    the grid's per-seed hitting samples, the best step per threshold and whether it lies on the grid's edge, and the
    fits per threshold; the replay is one seed of its first point's problem (SFT) at a short budget."""
    from anchorft.studies import drift
    from anchorft.w2s.config import load_config

    res = json.loads((Path(folder) / "sweep.json").read_text())
    spec = dict(res["spec"])
    base = dict(spec["base"])
    config = load_config(base.pop("preset"), {**base, **spec["points"][0], "modes": ["sft"]}).to_dict()
    rec = _meta(name, command, res.get("provenance"), {"torch": 1}, {}, **more)
    keep = ("etas", "best", "budget_samples")
    points = [
        {"params": p["params"], "series": {k: {f: v[f] for f in keep} for k, v in p["series"].items()}}
        for p in res["points"]
    ]
    rec["config"], rec["spec"] = config, spec
    rec["results"] = {"points": points, "fits_by_threshold": res["fits_by_threshold"]}
    rec["replay"] = {"w2s": drift.w2s_replay(config, 1)}
    return rec


def make_chi_record(name: str, folder: str | Path, command: str, **more) -> dict:
    """The record of a finished `w2s sweep --kind chi` folder: per point its parameters, chi and each mode's initial,
    final and per-seed final alignments (no curves); the replay is one seed of its first point at a short budget."""
    from anchorft.studies import drift
    from anchorft.w2s.config import load_config

    res = json.loads((Path(folder) / "sweep.json").read_text())
    spec = dict(res["spec"])
    base = dict(spec["base"])
    config = load_config(base.pop("preset"), {**base, **spec["points"][0]}).to_dict()
    rec = _meta(name, command, res.get("provenance"), {"torch": 1}, {}, **more)
    keep = ("init", "final", "final_per_seed")
    points = [
        {"params": p["params"], "chi": p["x"], "modes": {m: {k: v[k] for k in keep} for m, v in p["modes"].items()}}
        for p in res["points"]
    ]
    rec["config"], rec["spec"], rec["results"] = config, spec, {"points": points}
    rec["replay"] = {"w2s": drift.w2s_replay(config, 1)}
    return rec


def make_rho_star_record(name: str, folder: str | Path, command: str, theory: str | Path, theory_command: str,
                         **more) -> dict:  # fmt: skip
    """The record of a bisected overlap sweep (`configs/w2s/sweep-rho-star.yaml`) beside the population drift's
    rho* (`anchorft w2s theory ... --json`, the file `theory`): each seed's bisected boundary and their summary; the
    replay is one seed of the sweep's problem at a short budget."""
    from anchorft.studies import drift
    from anchorft.w2s.config import load_config

    res = json.loads((Path(folder) / "sweep.json").read_text())
    th = json.loads(Path(theory).read_text())
    spec = dict(res["spec"])
    base = dict(spec["base"])
    config = load_config(base.pop("preset"), {**base, "n_seeds": 1}).to_dict()
    rec = _meta(name, command, res.get("provenance"), {"torch": 1}, {}, **more)
    (row,) = res["bisect"]["modes"]["w2s"]
    keep = ("seed", "boundary_rho", "monotone", "lo", "hi", "bracketed")
    rec["config"], rec["spec"] = config, {k: v for k, v in spec.items() if k != "points"}
    rec["results"] = {
        "per_seed": [{k: r.get(k) for k in keep} for r in row["per_seed"]],
        "summary": row["summary"],
        "rho_star": th["rho_star"],
        "theory_command": theory_command,
    }
    rec["replay"] = {"w2s": drift.w2s_replay(config, 1)}
    return rec


def make_verdict_record(
    name: str, verdict_dir: str | Path, study_records: str | Path, command: str, code: str | Path | None = None
) -> dict:
    """The record of a `toy verdict` output folder (its verdict.json) computed on the study record
    `study_records` (`anchorft toy pack`): the verdict, the command, the commit, the bases' cache keys, and the
    replay (each base's estimates re-scored from the study record's grades). `code`: the checkout whose code computed
    the verdict (its commit is recorded; default: this package's), since verdict.json does not name it."""
    from anchorft import provenance
    from anchorft.studies import drift
    from anchorft.studies.testbed.record import unpack_study

    verdict = json.loads((Path(verdict_dir) / "verdict.json").read_text())
    verdict["bases"] = [Path(b).name for b in verdict["bases"]]
    keys = {}
    for f in sorted(Path(study_records).glob("base-seed*.json")):
        res = json.loads(json.loads(f.read_text())["text"]["results.json"])
        keys[f.stem.removeprefix("base-seed")] = res["base"]["pretrain"]["key"]
    prov = provenance.provenance()
    if code is not None:
        git = provenance.git_state(Path(code) / "src")
        prov.update(git_commit=git["commit"], git_dirty=git["dirty"])
    rec = _meta(name, command, prov, {"verdict": 1}, keys, study_record=str(study_records))
    rec["results"] = verdict
    with tempfile.TemporaryDirectory(prefix="anchorft-verdict-") as tmp:
        unpack_study(study_records, tmp)
        rec["replay"] = {"verdict": drift.verdict_replay(tmp, verdict)}
    return rec


# ---------------------------------------------------------------------------------------------------------------
# tables


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def _seeds(m: dict, key: str, base: float | None = None, scale: float = 100.0) -> str:
    vals = [(s[key] - (base or 0.0)) * scale for s in m["per_seed"]]
    return ", ".join(f"{v:+.1f}" if base is not None else f"{v:.1f}" for v in vals)


def _front_rows(res: dict) -> dict[str, dict]:
    from anchorft.studies.testbed.report import front_table

    front = [r for r in res["methods"] if r == "sft" or r.startswith("l2") or r == "rpsft-k24"]
    return {row["run"]: row for row in front_table(res, front)}


def _demo_table(rec: dict) -> str:
    res = rec["results"]["single"]
    base, st = res["base"], res["settings"]
    front = _front_rows(res)
    lines = [
        "| model | ID greedy (change; per seed) | ID Pass@4 | OOD mean (change; per seed) | retention | "
        "excess over the front (SE) |",
        "|---|---|---|---|---|---|",
        f"| base | {_pct(base['id_greedy'])} | {_pct(base['id_pass@k'])} | {_pct(base['ood_mean'])} | 1.000 | - |",
    ]
    for name, m in res["methods"].items():
        row = front.get(name, {})
        ex = f"{row['excess']:+.1f} ({row['se_joint'] or 0:.1f})" if row else "-"
        lines.append(
            f"| {name} | {_pct(m['id_greedy'])} ({_pts(m['id_greedy'] - base['id_greedy'])}; "
            f"{_seeds(m, 'id_greedy', base['id_greedy'])}) | {_pct(m['id_pass@k'])} | {_pct(m['ood_mean'])} "
            f"({_pts(m['ood_mean'] - base['ood_mean'])}; {_seeds(m, 'ood_mean')}) | "
            f"{m['ood_mean'] / base['ood_mean']:.3f} | {ex} |"
        )
    lines.append("")
    lines.append(
        f"Record `records/{rec['name']}.json`: `{rec['command']}` at commit {(rec['commit'] or '?')[:7]}, base cache "
        f"key {', '.join(rec['cache_keys'].values())} (pretraining seed {', '.join(rec['cache_keys'])}, "
        f"{rec['threads']['pretrain']} threads; each fine-tune on {rec['threads']['finetune']}), fine-tuning seeds "
        f"{', '.join(map(str, st['seeds']))}, {st['id_items']} ID items."
    )
    return "\n".join(lines) + "\n"


def _demo_time(rec: dict) -> str:
    """The demo's time from a fresh clone with an empty cache, each measurement with the machine's load."""
    runs = rec.get("timings") or []
    if not runs:
        return "`make demo`'s time from a fresh clone: not measured for this record.\n"
    each = "; ".join(
        f"{int(t['wall_s'] // 60)} min {round(t['wall_s'] % 60)} s (load average before {t['load_before']}, after "
        f"{t['load_after']}" + (f"; beside it {t['beside']}" if t.get("beside") else "") + ")"
        for t in runs
    )
    return (
        f"`make demo` from a fresh clone with an empty cache (`git clone` of commit {runs[0]['commit'][:7]}, "
        f"`ANCHORFT_CACHE` an empty folder, `/usr/bin/time -v make demo`, the install included; "
        f"{runs[0]['machine']}): {each}.\n"
    )


def _demo_base(rec: dict) -> str:
    """The demo's base model: its size, pretraining accuracies and its scores on the comparison's items."""
    res = rec["results"]["single"]
    base, pre = res["base"], res["base"]["pretrain"]
    acc = ", ".join(f"{k} {round(100 * v)}" for k, v in pre["greedy_accuracy"].items())
    ood = " / ".join(str(round(100 * v)) for v in base["ood"].values())
    return (
        f"From `records/demo.json` (cache key `{pre['key']}`, pretraining seed {', '.join(rec['cache_keys'])} on "
        f"{rec['threads']['pretrain']} threads): {pre['params']:,} parameters, {pre['train_seconds']:.0f} s of "
        f"training in `make demo`'s first measurement. Greedy accuracy on held-out items per skill after "
        f"pretraining: {acc}. On the comparison's own evaluation items ({', '.join(base['ood'])}) the base scores "
        f"{ood} (mean {_pct(base['ood_mean'])}) and {_pct(base['id_greedy'])} % on the ID task.\n"
    )


def _acceptance_cells(res: dict) -> tuple[str, str, str]:
    from anchorft.studies.testbed.report import acceptance

    acc = acceptance(res)
    return f"{acc['id_gain_points']:+.1f}", f"{-acc['ood_loss_points']:+.1f}", "met" if acc["ok"] else "NOT met"


def _demo_check_table(rec: dict) -> str:
    from anchorft.studies.testbed.report import ACCEPT_ID_GAIN, ACCEPT_OOD_LOSS

    lines = [
        f"| base (pretraining seed) | base ID / OOD | SFT: ID change | SFT: OOD change | acceptance (>= "
        f"+{ACCEPT_ID_GAIN:.0f}, <= -{ACCEPT_OOD_LOSS:.0f}) | SFT retention | L2 (lambda 0.01): ID change, "
        "retention | above the front of sft, L2 and rpsft |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b, res in rec["results"].items():
        base, sft, l2 = res["base"], res["methods"]["sft"], res["methods"]["l2-lam0.01"]
        idc, oodc, ok = _acceptance_cells(res)
        front = _front_rows(res)
        above = ", ".join(f"{r} ({v['excess']:+.1f})" for r, v in front.items() if v["excess"] > 0 and not
                          r.startswith("l2") and r != "sft") or "none"  # fmt: skip
        lines.append(
            f"| {b} | {_pct(base['id_greedy'])} / {_pct(base['ood_mean'])} | {idc} | {oodc} | {ok} | "
            f"{sft['ood_mean'] / base['ood_mean']:.3f} | {_pts(l2['id_greedy'] - base['id_greedy'])}, "
            f"{l2['ood_mean'] / base['ood_mean']:.3f} | {above} |"
        )
    lines += [
        "",
        f"Record `records/{rec['name']}.json`: `{rec['command']}` at commit {(rec['commit'] or '?')[:7]}, cache keys "
        + ", ".join(f"{b}: {k}" for b, k in rec["cache_keys"].items())
        + f"; pretraining on {rec['threads']['pretrain']} threads, each fine-tune on {rec['threads']['finetune']}.",
    ]
    return "\n".join(lines) + "\n"


EARLIER_ID_BAR = 10.0  # the acceptance's ID bar before the demo's settings were chosen over the verdict's bases


def _names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _demo_check_bar(rec: dict) -> str:
    """What the check's bases would give under the earlier ID bar: the bases under it and those exactly at it."""
    gains = {b: float(_acceptance_cells(res)[0]) for b, res in rec["results"].items()}
    bar = f"+{EARLIER_ID_BAR:.1f}"
    under = [b for b, g in gains.items() if f"{g:+.1f}" != bar and g < EARLIER_ID_BAR]
    at = [b for b, g in gains.items() if f"{g:+.1f}" == bar]
    parts = []
    if under:
        word = "base" if len(under) == 1 else "bases"
        parts.append(f"{word} {_names([f'{b} ({gains[b]:+.1f})' for b in under])} would not be met")
    if at:
        word = "base" if len(at) == 1 else "bases"
        parts.append(f"{word} {_names(at)} {'is' if len(at) == 1 else 'are'} at exactly {bar}")
    said = "; ".join(parts) or "every base is above it"
    return f"Under the earlier +{EARLIER_ID_BAR:.0f} bar, {said}.\n"


def _study_results(root: Path, study: str) -> dict[str, dict]:
    """{base seed: results.json} of a study record (`anchorft toy pack`'s base-seedB.json files)."""
    out = {}
    for f in sorted((root / study).glob("base-seed*.json")):
        out[f.stem.removeprefix("base-seed")] = json.loads(json.loads(f.read_text())["text"]["results.json"])
    return out


def _demo_choice(root: Path) -> str:
    """What the demo's settings were chosen from: SFT and L2 (lambda 0.01) on the verdict's bases, from the
    verdict's study record."""
    rec = load_record("verdict", root)
    study = rec["study_record"]
    bases = _study_results(root, study)
    first = json.loads((root / study / f"base-seed{next(iter(bases))}.json").read_text())
    cfg = yaml.safe_load(first["text"]["config.yaml"])
    gain, keep, loss, l2_keep, two = {}, {}, {}, {}, {}
    for b, r in bases.items():
        base, sft, l2 = r["base"], r["methods"]["sft"], r["methods"]["l2-lam0.01"]
        gain[b] = 100 * (sft["id_greedy"] - base["id_greedy"])
        keep[b] = sft["ood_mean"] / base["ood_mean"]
        loss[b] = 100 * (base["ood_mean"] - sft["ood_mean"])
        l2_keep[b] = l2["ood_mean"] / base["ood_mean"]
        first_two = [s for s in sft["per_seed"] if s["seed"] in (0, 1)]
        two[b] = 100 * (sum(s["id_greedy"] for s in first_two) / len(first_two) - base["id_greedy"])
    low = min(gain, key=gain.get)
    seeds = len(next(iter(bases.values()))["methods"]["sft"]["per_seed"])
    lr = f"{cfg['learning_rate']:.0e}".replace("e-0", "e-")
    return (
        f"From the verdict's study record (`{study}/`, pretraining seeds {_names(list(bases))}; lr {lr}, "
        f"{cfg['max_steps']} steps): SFT gained {min(gain.values()):+.1f} to "
        f"{max(gain.values()):+.1f} ID points (each base's mean over {seeds} fine-tuning seeds) and kept "
        f"{min(keep.values()):.2f}-{max(keep.values()):.2f} of its OOD accuracy, losing "
        f"{min(loss.values()):.0f}-{max(loss.values()):.0f} OOD points; L2 at lambda 0.01 kept "
        f"{min(l2_keep.values()):.2f}-{max(l2_keep.values()):.2f}. The smallest SFT gain is base {low}'s, "
        f"{gain[low]:+.1f} ({two[low]:+.1f} over fine-tuning seeds 0 and 1, the demo's two).\n"
    )


VERDICT_LABELS = {
    "sft": "sft",
    "rpsft-k24": "rpsft, block, k 24 (the paper's)",
    "osf-k24": "OSF, effective_rank 24",
    "subspace": "subspace kind, k 24",
    "lora": "LoRA, r 32",
    "lora-anchor": "LoRA + anchor, r 32, k 24",
    "wise-sft": "WiSE-FT from sft",
    "wise-l2": "WiSE-FT from l2 (lambda 0.01)",
    "wise-subspace": "WiSE-FT from the subspace kind",
    "sft-lr5e-4": "sft, lr 5e-4",
    "sft-lr2.5e-4": "sft, lr 2.5e-4",
}


def _knob(run: str, candidates: list[str]) -> str:
    """A picked run's knob: its name's tokens after those all candidates share (lam0.1 -> lambda 0.1, ...)."""
    toks = [c.split("-") for c in candidates]
    n = 0
    while all(len(t) > n and t[n] == toks[0][n] for t in toks):
        n += 1
    words = {"lam": "lambda ", "lr": "lr ", "wise": "alpha "}
    out = []
    for t in run.split("-")[n:]:
        m = re.match(r"(lam|lr|wise)(.+)", t)
        out.append(words[m.group(1)] + m.group(2) if m else t)
    return ", ".join(out).replace("e, ", "e-")  # lr 4e-3 splits at its hyphen


def _interval(row: dict | None) -> str:
    """A row's interval as the tables print it, "[low, high]" in points; "-" for none."""
    return f"[{row['low']:+.1f}, {row['high']:+.1f}]" if row else "-"


def _verdict_table(rec: dict) -> str:
    v = rec["results"]
    pct = round(100 * v["level"])
    k = len(v["bases"])
    lines = [
        f"| option | retention | ID gain | pooled excess | {pct} % interval (Hartung-Knapp, {k - 1} df) | {pct} %, "
        "items shared | bases above the front | knob picked on validation (bases) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run, p in v["pooled"].items():
        sh = p.get("shared_items")
        decided = p["high"] < 0 or p["low"] > 0
        if sh:
            decided = decided and (sh["high"] < 0 or sh["low"] > 0)
        est = f"**{p['mean']:+.1f}**" if decided else f"{p['mean']:+.1f}"
        knob = "-"
        if run in (v.get("picks") or {}):
            picked = [b[run]["picked"] for b in v["per_base"]]
            counts = sorted({r: picked.count(r) for r in picked}.items(), key=lambda kv: -kv[1])
            knobs = [f"{_knob(r, v['picks'][run])} ({n})" for r, n in counts]
            knob = ("; " if any(", " in k for k in knobs) else ", ").join(knobs)
        lines.append(
            f"| {VERDICT_LABELS.get(run, run)} | {p['retention']:.3f} | {p['gain']:+.1f} | {est} | "
            f"{_interval(p)} | {_interval(sh)} | {p['above']} of {p['bases']} | {knob} |"
        )
    return "\n".join(lines) + "\n"


def _verdict_per_base_table(rec: dict) -> str:
    v = rec["results"]
    names = [b.removeprefix("base-seed") for b in v["bases"]]
    lines = ["| option | " + " | ".join(f"base {n}" for n in names) + " |", "|---|" + "---|" * len(names)]
    from anchorft.studies.testbed.verdict import base_interval

    for run in v["pooled"]:
        cells = ["{:+.1f} [{:+.1f}, {:+.1f}]".format(*base_interval(v, b[run])) for b in v["per_base"]]
        lines.append(f"| {run} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _decision_table(rec: dict) -> str:
    """A `--confirm` verdict's rows as the decision reads them (`decision.decide`): the pooled, bias-corrected excess,
    its bias-aware Hartung-Knapp interval and the items-shared one, the p of the interval the decision uses, Holm's
    adjusted p over every row, what is decided, and on how many bases the row lies above the front (and keeps more
    than the front's last point, where the front is the chord to the base)."""
    v = rec["results"]
    d = v["decision"]
    pct = round(100 * (1 - d["alpha"]))
    conf = (d.get("confirmatory") or {}).get("row")
    lines = [
        f"| option | pooled excess | {pct} % interval | items shared | p | p (Holm) | decided | bases above |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run, p in v["pooled"].items():
        row, sh = d["rows"][run], p.get("shared_items")
        label = VERDICT_LABELS.get(run, run) + (" (confirmatory)" if run == conf else "")
        past = f" ({p['past_front']} past the front's last point)" if p.get("past_front") else ""
        lines.append(
            f"| {label} | {p['mean']:+.1f} | {_interval(p)} | {_interval(sh)} | {row['p']:.3f} | "
            f"{row['p_holm']:.3f} | {row['decided']} | {p['above']} of {p['bases']}{past} |"
        )
    return "\n".join(lines) + "\n"


def _decision_per_base_table(rec: dict) -> str:
    """A `--confirm` verdict's rows base by base (one line a base, so that 20 bases stay readable): each row's
    corrected excess on the base, the confirmatory row's bias-corrected bootstrap interval there and the knob it
    picked on the base's validation items (with the share of the replicates that picked the same)."""
    from anchorft.studies.testbed.verdict import base_interval

    v = rec["results"]
    conf = v["decision"]["confirmatory"]["row"]
    runs = list(v["pooled"])
    pick = (v.get("picks") or {}).get(conf)
    head = [VERDICT_LABELS.get(r, r) for r in runs]
    lines = [
        "| base | " + " | ".join(head) + f" | {VERDICT_LABELS.get(conf, conf)}: interval | knob picked (share) |",
        "|---|" + "---|" * (len(runs) + 2),
    ]
    for name, b in zip(v["bases"], v["per_base"]):
        cells = [f"{base_interval(v, b[r])[0]:+.1f}" for r in runs]
        c = b[conf]
        knob = f"{_knob(c['picked'], pick)} ({c['pick_share']:.2f})" if pick and "picked" in c else "-"
        _, low, high = base_interval(v, c)
        lines.append(
            f"| {name.removeprefix('base-seed')} | " + " | ".join(cells) + f" | [{low:+.1f}, {high:+.1f}] | {knob} |"
        )
    return "\n".join(lines) + "\n"


def _confirmatory_line(rec: dict) -> str:
    """The confirmatory row's answer, and its per-base corrected excesses with the share of the replicates that
    picked the knob the data picked, and their sample SD between bases (what the power plan assumed)."""
    v = rec["results"]
    c = v["decision"]["confirmatory"]
    per = [b[c["row"]] for b in v["per_base"]]
    excess = ", ".join(f"{b['corrected']:+.1f}" for b in per)
    share = ", ".join(f"{b['pick_share']:.2f}" for b in per) if all("pick_share" in b for b in per) else None
    sd = float(np.std([b["corrected"] for b in per], ddof=1))
    out = (
        f"Confirmatory row: {VERDICT_LABELS.get(c['row'], c['row'])}, {c['mean']:+.1f} [{c['low']:+.1f}, "
        f"{c['high']:+.1f}] ({round(100 * (1 - v['decision']['alpha']))} %, smallest effect of interest "
        f"{c['sesoi']:g} points): {c['outcome']}. Per base (pretraining seeds "
        f"{', '.join(b.removeprefix('base-seed') for b in v['bases'])}) its corrected excess is {excess}"
    )
    out += f" (share of the replicates picking the knob picked on the data: {share})" if share else ""
    return out + f"; their sample SD between bases is {sd:.1f} points.\n"


def _decision_answer(rec: dict) -> str:
    """A `--confirm` verdict's answer in words: the confirmatory row's estimate, interval and outcome with the rule
    that gave it, and which rows Holm decides either way (each with its pooled excess and adjusted p)."""
    v = rec["results"]
    d = v["decision"]
    c = d["confirmatory"]
    pooled = v["pooled"][c["row"]]

    def rows(decided: str) -> str:
        got = [
            f"{VERDICT_LABELS.get(r, r)} ({row['mean']:+.1f}, Holm p {row['p_holm']:.3f})"
            for r, row in d["rows"].items()
            if row["decided"] == decided
        ]
        return "; ".join(got) or "none"

    rest = [f"{VERDICT_LABELS.get(r, r)} ({x['mean']:+.1f})" for r, x in d["rows"].items() if x["decided"] == "-"]
    return (
        f"The confirmatory row, {VERDICT_LABELS.get(c['row'], c['row'])} at the knob picked on each base's validation "
        f"items: {c['mean']:+.1f} points, {round(100 * (1 - d['alpha']))} % interval [{c['low']:+.1f}, "
        f"{c['high']:+.1f}]: **{c['outcome']}** (above the front needs the lower end > 0, under it the upper end < 0, "
        f"no effect of interest the whole interval within +-{c['sesoi']:g} points); {pooled['above']} of "
        f"{pooled['bases']} bases lie above the front. Exploratory, Holm over the {len(d['rows'])} rows: decided "
        f"under the front: {rows('under')}; decided above: {rows('above')}; not decided: {'; '.join(rest)}.\n"
    )


W2S_COLUMNS = (
    ("target_alignment", "target with theta_1"),
    ("nontarget_alignment", "non-target with theta_2"),
    ("nontarget_target_alignment", "non-target with theta_1"),
)
W2S_MODES = {"w2s": "W2S", "sft": "SFT", "ceiling": "ceiling (true labels, W2S's inputs)"}


def _w2s_table(rec: dict) -> str:
    cfg = rec["config"]
    lines = [
        "| mode | " + " | ".join(f"{c} (init -> final; per seed)" for _, c in W2S_COLUMNS) + " |",
        "|---|" + "---|" * len(W2S_COLUMNS),
    ]
    for mode, r in rec["results"].items():
        cells = [
            f"{r['init'][k]:.3f} -> {r['final'][k]:.3f} ({', '.join(f'{x:.3f}' for x in r['final_per_seed'][k])})"
            for k, _ in W2S_COLUMNS
        ]
        lines.append(f"| {W2S_MODES.get(mode, mode)} | " + " | ".join(cells) + " |")
    n = rec["threads"]["torch"]
    lines += [
        "",
        f"Record `records/{rec['name']}.json`: `{rec['command']}` at commit {(rec['commit'] or '?')[:7]} "
        f"(d = {cfg['d']}, s = {cfg['s']}, seeds {', '.join(str(cfg['seed'] + i) for i in range(cfg['n_seeds']))}, "
        f"{cfg['steps']:,} steps of batch {cfg['batch_size']}, {n} torch thread{'s' * (n > 1)}).",
    ]
    return "\n".join(lines) + "\n"


# the verdict the README's key results quote: its record, the page that reports it, and how its study stands (a
# pilot judged after the fact, or a study whose confirmatory row was fixed before its first cell)
README_VERDICT = {
    "record": "verdict2",
    "page": "docs/alternatives.md#verdict2",
    "link": "the study",
    "kind": "rule set before",
    "confirmatory": True,  # True: its confirmatory row was fixed before its first cell, and the README quotes it
}
README_ROWS = (("rpsft-k24", "block RPSFT"), ("subspace", "the subspace kind"), ("sft", "SFT"), ("lora", "plain LoRA"))


def _readme_results(root: Path) -> str:
    """The README's key results: one line a cell (what was measured, the number, the result page that gives its
    record, command, seeds and caveats)."""
    names = (REPLICATED["paper"], "demo", "demo-check", README_VERDICT["record"])
    w2s, demo, check, verdict = (load_record(n, root) for n in names)
    w = w2s["results"]["w2s"]
    rep = w2s["replication"]
    block = f"seeds {rep['seeds'][0]}-{rep['seeds'][-1]}"
    per_seed = {k: w["final_per_seed"][k] for k in ("target_alignment", "nontarget_alignment")}
    bases = {"0": demo["results"]["single"], **check["results"]}
    sft = [_acceptance_cells(r) for r in bases.values()]
    keep = [r["methods"]["sft"]["ood_mean"] / r["base"]["ood_mean"] for r in bases.values()]
    l2 = {b: r["methods"]["l2-lam0.01"] for b, r in bases.items()}
    l2_keep = [m["ood_mean"] / bases[b]["base"]["ood_mean"] for b, m in l2.items()]
    l2_gain = [100 * (m["id_greedy"] - bases[b]["base"]["id_greedy"]) for b, m in l2.items()]
    met = sum(ok == "met" for *_, ok in sft)
    n = len(bases)
    # the verdict's six bases judged with the method a confirmatory answer needs (hull, bias, Holm): the rows as the
    # decision reads them (the items-shared interval, Holm's p over every option)
    d = verdict["results"]["decision"]["rows"]
    k = len(verdict["results"]["bases"])
    decided = [
        f"{way}: " + "; ".join(VERDICT_LABELS.get(r, r) for r, row in d.items() if row["decided"] == way)
        for way in ("under", "above")
        if any(row["decided"] == way for row in d.values())
    ]

    def iv(run: str) -> str:
        row = d[run]
        return f"{row['mean']:+.1f} {_interval(row)}, Holm p {row['p_holm']:.2f}"

    w2s_page, demo_page, verdict_page = (
        "[W2S replication](docs/w2s.md#replication)",
        "[the demo](docs/results/demo.md)",
        f"[{README_VERDICT['link']}]({README_VERDICT['page']})",
    )
    judged = [(run, label) for run, label in README_ROWS if run in d]
    verdict_rows = [
        ("which fine-tuning keeps most" if i == 0 else "",
         f"excess ID gain over the L2 hull, {k} bases, {README_VERDICT['kind']} (Holm over {len(d)}): {label}"
         if i == 0 else label, iv(run), verdict_page)
        for i, (run, label) in enumerate(judged)
    ]  # fmt: skip
    if README_VERDICT["confirmatory"] and (c := verdict["results"]["decision"].get("confirmatory")):
        verdict_rows.append(
            ("", f"the confirmatory row ({VERDICT_LABELS.get(c['row'], c['row'])}, 95 %, smallest effect "
             f"{c['sesoi']:g} points)", f"{c['mean']:+.1f} {_interval(c)}: {c['outcome']}", verdict_page)
        )  # fmt: skip
    rows = [
        ("W2S learns the target (Thm 1)", f"target alignment, paper preset, fresh {block}: mean [range]",
         f"{w['init']['target_alignment']:.3f} -> {w['final']['target_alignment']:.3f} "
         f"[{min(per_seed['target_alignment']):.3f}, {max(per_seed['target_alignment']):.3f}]", w2s_page),
        ("W2S keeps the non-target feature", "non-target alignment with theta_2, the same runs",
         f"{w['init']['nontarget_alignment']:.3f} -> {w['final']['nontarget_alignment']:.3f} "
         f"[{min(per_seed['nontarget_alignment']):.3f}, {max(per_seed['nontarget_alignment']):.3f}]", w2s_page),
        ("testbed: SFT forgets", f"SFT's OOD retention, the demo's comparison on {n} bases",
         f"{min(keep):.2f}-{max(keep):.2f}", demo_page),
        ("testbed: an L2 anchor keeps", f"L2 (lambda 0.01): OOD retention, {n} bases", f"{min(l2_keep):.2f}-"
         f"{max(l2_keep):.2f}", demo_page),
        ("", "L2 (lambda 0.01): ID gain in points", f"{min(l2_gain):+.1f} to {max(l2_gain):+.1f}", demo_page),
        ("", "the demo's acceptance (SFT's ID gain and OOD loss)", f"met on {met} of {n} bases", demo_page),
        *verdict_rows,
        ("", f"options decided either way after Holm (of {len(d)})", " / ".join(decided) or "none", verdict_page),
    ]  # fmt: skip
    lines = ["| result | measure | number | record, command, caveats |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines) + "\n"


def _eval_cell_cost(root: Path) -> str:
    """records/costs/eval-cell.json (`benchmarks/bench_base_cost.py`): a cell's evaluation under the pilot's and the
    next study's settings, before and after the shared prefill."""
    rec = json.loads((root / "records" / "costs" / "eval-cell.json").read_text(encoding="utf-8"))
    sec, med, prov = rec["seconds"], rec["median_seconds"], rec["provenance"]

    def each(name: str) -> str:
        return f"{med[name]:.1f} s (runs {', '.join(f'{x:.2f}' for x in sec[name])})"

    yes = {True: "yes", False: "NO"}
    return (
        f"`{prov['command']}` at commit {prov['commit'][:7]} ({prov['cpus']} cores, load average "
        f"{prov['load_before'][0]} before, {prov['load_after'][0]} after; {rec['repeats']} runs of each setting, "
        f"interleaved, the median kept), on {rec['label']}, one torch thread as a cell runs. A cell's evaluation: "
        f"{each('pilot')} under the pilot's settings as they ran (8 ID samples a problem, each sample's prompt "
        f"prefilled on its own, the evaluation sets built per cell); {each('pilot-shared')} with the shared prefill "
        f"and the sets built once ({rec['pilot / pilot-shared']:.2f}x); {each('verdict2')} under "
        f"`configs/toy/verdict2.yaml`'s settings (greedy only; {rec['pilot / verdict2']:.2f}x the pilot's). Greedy "
        f"grades equal in all three: {yes[rec['greedy grades equal']]}; every sample's grade equal with and without "
        f"the shared prefill: {yes[rec['sample grades equal (pilot, pilot-shared)']]}.\n"
    )


def _w2s_compile(root: Path) -> str:
    """records/costs/w2s-compile.json (`benchmarks/bench_w2s_compile.py`): torch.compile against the fused step."""
    r = json.loads((root / "records" / "costs" / "w2s-compile.json").read_text(encoding="utf-8"))
    return (
        f"`{r['command'].replace(' --json records/costs/w2s-compile.json', '')}` at commit {r['commit'][:7]} (torch "
        f"{r['torch']}, {r['seeds']} seeds, one thread, best of {r['repeats']} x {r['steps']} steps, load average "
        f"{r['load_average'][0]}): the fused step {r['fused_ms']:.3f} ms, the compiled functional step "
        f"{r['compiled_ms']:.3f} ms (**{r['compiled / fused']:.2f}x** the fused step's time); compile "
        f"{r['compile_cold_s']:.1f} s cold and {r['compile_warm_s']:.1f} s with inductor's cache warm; the two "
        f"updates agree to {r['max_abs_difference']:.0e}.\n"
    )


def _w2s_gram_free(root: Path) -> str:
    """records/costs/w2s-gram-free.json (`benchmarks/bench_w2s_gram_free.py`): the Gram-free W2S step."""
    r = json.loads((root / "records" / "costs" / "w2s-gram-free.json").read_text(encoding="utf-8"))
    rows = "; ".join(
        f"{x['seeds']} seeds: fused {x['fused_ms']:.3f} ms, Gram-free {x['gram_free_ms']:.3f} ms "
        f"(**{x['gram_free / fused']:.2f}x**; weights after a chunk agree to {x['max_abs_difference']:.0e})"
        for x in r["rows"]
    )
    return (
        f"`{r['command'].replace(' --json records/costs/w2s-gram-free.json', '')}` at commit {r['commit'][:7]} "
        f"(torch {r['torch']}, one thread, best of {r['repeats']} x {r['chunks']} chunks of {r['chunk']} steps, load "
        f"average {r['load_average'][0]}): {rows}.\n"
    )


def _w2s_step(root: Path) -> str:
    """records/costs/w2s-step.json (`benchmarks/bench_w2s_step.py --whole`): the step's speed and the whole preset."""
    r = json.loads((root / "records" / "costs" / "w2s-step.json").read_text(encoding="utf-8"))
    w, f, whole = r["w2s"], r["sft"], r["whole"]
    return (
        f"`{r['command'].replace(' --json records/costs/w2s-step.json', '')}` at commit {r['commit'][:7]} (torch "
        f"{r['torch']}, paper preset, {r['seeds']} seeds batched, one thread, {r['clock']} time; a step is the "
        f"marginal cost of one, from runs of {r['steps']} and {3 * r['steps']} steps; best of "
        f"{r['repeats']} interleaved repeats, load average {r['load_average'][0]} at the end; matmul rate "
        f"{r['matmul_gflops']:.0f} GFLOP/s):\n\n"
        "| | us per sample | full-space NumPy loop / this | share of the matmul rate |\n"
        "|---|---|---|---|\n"
        f"| W2S step (`fused.ReducedStepper`, {w['step_ms']:.2f} ms a step) | {w['us_per_sample']:.2f} | "
        f"{w['numpy_us_per_sample'] / w['us_per_sample']:.1f}x | {w['share_of_matmul_rate']:.1%} |\n"
        f"| competent NumPy loop in the same reduced coordinates | {w['numpy_reduced_us_per_sample']:.2f} | "
        f"{w['numpy_us_per_sample'] / w['numpy_reduced_us_per_sample']:.1f}x | |\n"
        f"| SFT step (dense, d = 1024, {f['step_ms']:.2f} ms a step) | {f['us_per_sample']:.2f} | "
        f"{f['numpy_us_per_sample'] / f['us_per_sample']:.1f}x | {f['share_of_matmul_rate']:.1%} |\n"
        f"| whole paper preset (`anchorft w2s run --preset paper`: W2S and SFT, {whole['samples']:,} samples, "
        f"start-up, risks and plots included; {whole['cpu_s']:.1f} CPU-s) | {whole['us_per_sample']:.2f} | "
        f"**{whole['ratio']:.1f}x** | |\n\n"
        f"The W2S step's three GEMMs alone take {w['gemms_ms']:.3f} ms and its draws {w['draws_ms']:.3f} ms, so its "
        f"share of the matmul rate cannot exceed {w['bound_share']:.0%} without faster GEMMs or draws; the rest of "
        f"the step ({w['step_ms'] - w['gemms_ms'] - w['draws_ms']:.2f} ms) is elementwise work and per-op overhead. "
        f"The SFT step's GEMMs alone take {whole['sft_gemms_ms']:.2f} ms and its draws {whole['sft_draws_ms']:.2f} "
        f"ms; with nothing but both steps' GEMMs and draws (no set-up, elementwise work, risks or plots) the whole "
        f"preset would take {whole['floor_cpu_s']:.1f} CPU-s, {whole['bound_ratio']:.1f}x the full-space loop at "
        "most.\n"
    )


def _study_cost(root: Path) -> str:
    """records/costs/verdict2.json: each base of the next verdict study as it finished (comparison, WiSE-FT, pack),
    with the machine's load, and the study so far."""
    rec = json.loads((root / "records" / "costs" / "verdict2.json").read_text(encoding="utf-8"))
    lines = [
        "| base | pretraining (s) | fine-tunes | their training, summed (min) | comparison, wall (min) "
        "| WiSE-FT, wall (min) | load average before, after |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in rec["bases"]:
        lines.append(
            f"| {b['base']} | {b['pretrain_train_s']:.0f} | {b['finetunes']} | {b['finetune_train_s_sum'] / 60:.1f} | "
            f"{b['compare_s'] / 60:.1f} | {b['interpolate_s'] / 60:.1f} | {b['load_before'][0]:.1f}, "
            f"{b['load_after'][0]:.1f} |"
        )
    bases = rec["bases"]
    wall = sum(b["compare_s"] + b["interpolate_s"] + b["pack_s"] for b in bases)
    evaluation = json.loads((root / "records" / "costs" / "eval-cell.json").read_text(encoding="utf-8"))
    cell = evaluation["median_seconds"]["verdict2"]
    cells = sum(b["finetunes"] for b in bases)
    lines.append("")
    lines.append(
        f"{len(bases)} of {rec['n_bases']} bases{' so far' if len(bases) < rec['n_bases'] else ''}, "
        f"{wall / 3600:.1f} h of wall in all, from the fixed copy at commit {rec['code'][:7]} ({rec['how']}). Summed "
        f"over the bases: pretraining {sum(b['pretrain_train_s'] for b in bases) / 3600:.1f} h (the column's "
        f"seconds), fine-tuning {sum(b['finetune_train_s_sum'] for b in bases) / 3600:.1f} h of training over the "
        f"two workers, WiSE-FT {sum(b['interpolate_s'] for b in bases) / 60:.0f} min of wall; evaluation, not timed "
        f"apart in the study: {cells} cells at {cell:.1f} s a cell (the benchmark above) is about "
        f"{cells * cell / 3600:.1f} h of one core."
    )
    return "\n".join(lines) + "\n"


# claim -> its record: `anchorft w2s replicate CLAIM --seeds 1000-1009`, made with `make w2s NAME --from DIR`
REPLICATED = {c: f"w2s-replicate-{c}" for c in ("paper", "paper-sft-turn", "gain")}


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, list):
        return f"{min(v):.3f}-{max(v):.3f} ({len(v)} seeds)"
    return str(v)


def _replication_table(root: Path) -> str:
    """docs/w2s.md "Replication": each claim's documented numbers beside those of its replication on a fresh block
    of seeds, the rule written before the runs and the outcome."""
    lines = ["| claim | documented (seeds) | replicated (seeds) | rule | holds |", "|---|---|---|---|---|"]
    for claim, name in REPLICATED.items():
        rec = load_record(name, root)
        r = rec["replication"]
        doc = ", ".join(f"{k} {_num(v)}" for k, v in r["documented"].items())
        got = ", ".join(f"{k} {_num(v)}" for k, v in r["statistics"].items() if not k.endswith("_init"))
        seeds = f"{r['seeds'][0]}-{r['seeds'][-1]}"
        lines.append(f"| `{claim}` | {doc} ({r['reported_on']}) | {got} ({seeds}) | {r['rule']} | "
                     f"{'yes' if r['holds'] else '**no**'} |")  # fmt: skip
    lines += ["", "Records " + ", ".join(f"`records/{n}.json`" for n in REPLICATED.values()) + ": `"
              + "`, `".join(load_record(n, root)["command"] for n in REPLICATED.values()) + "`."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _trained_teacher_table(rec: dict) -> str:
    """docs/w2s.md "A trained weak teacher": the search's rows on the choosing seeds, then the chosen budget on the
    reporting block, with the chance that a true gain as large as the chosen one would have passed 3 se there."""
    lines = [
        "| weak_steps (seeds 0-2) | teacher risk | W2S risk (link) | gain +- se | gain / se |",
        "|---|---|---|---|---|",
    ]
    for r in rec["choice"]["rows"]:
        g, se = r["isotropic_gain_link"], r["isotropic_gain_link_se"]
        lines.append(f"| {r['weak_steps']} | {r['isotropic_risk_weak']:.3f} | {r['isotropic_risk_w2s@link']:.3f} | "
                     f"{g:+.3f} +- {se:.3f} | {g / se:+.1f} |")  # fmt: skip
    ok = [r for r in rec["choice"]["rows"] if r["isotropic_surpasses_teacher_link"]]
    chosen = max(ok, key=lambda r: r["isotropic_gain_link"] / r["isotropic_gain_link_se"])
    iso = rec["results"]["risks"]["isotropic"]
    g, se = iso["gain_over_weak"]["w2s@link"], iso["gain_over_weak_se"]["w2s@link"]
    cfg = rec["config"]
    seeds = f"{cfg['seed']}-{cfg['seed'] + cfg['n_seeds'] - 1}"
    power = 0.5 * (1 + math.erf((chosen["isotropic_gain_link"] / se - 3.0) / math.sqrt(2)))
    weak = iso["risk_per_seed"]["weak"]
    lines += [
        "",
        f"Chosen by the rule: weak_steps = {chosen['weak_steps']}. On seeds {seeds}: teacher risk "
        f"{iso['risk']['weak']:.3f} (per seed {min(weak):.3f}-{max(weak):.3f}), W2S through the link "
        f"{iso['risk']['w2s@link']:.3f}, gain **{g:+.3f} +- {se:.3f}** ({g / se:.1f} se): "
        f"{'beats' if g > 3 * se else '**does not beat**'} the trained teacher by 3 se. A true gain as large as the "
        f"choosing seeds' ({chosen['isotropic_gain_link']:+.3f}) would have passed 3 se there with probability "
        f"{power:.2f} (normal approximation with this se).",
        "",
        f"Record `records/{rec['name']}.json`: `{rec['choice']['command']}` (the choice), then `{rec['command']}`.",
    ]
    return "\n".join(lines) + "\n"


def _he6_table(rec: dict) -> str:
    """docs/w2s-scaling.md, SFT and the weak model with a He_6 link: per d, series and threshold, the best step of
    the widened grid, its median samples and how many seeds reached; then the fitted slopes in d."""
    thr = [str(t) for t in rec["spec"]["thresholds"]]
    head = " | ".join(f"{sr}, {t}: best eta / median samples / reaching" for sr in rec["spec"]["series"] for t in thr)
    lines = [f"| d | {head} |", "|---|" + "---|" * (len(thr) * len(rec["spec"]["series"]))]
    for p in rec["results"]["points"]:
        cells = []
        for sr in rec["spec"]["series"]:
            x = p["series"][sr]
            for t in thr:
                b = x["best"][t]
                n = sum(v is not None for v in b["samples_per_seed"])
                edge = f" (edge, {b['edge']})" if b["edge"] else ""
                med = "-" if b["median_samples"] is None else f"{b['median_samples']:,.0f}"
                grid = sorted(float(e) for e in x["etas"])
                cells.append(
                    f"{b['eta']:g}{edge} of {grid[0]:g}-{grid[-1]:g} / {med} / {n} of {len(b['samples_per_seed'])}"
                )
        lines.append(f"| {p['params']['d']} | " + " | ".join(cells) + " |")
    fits = rec["results"]["fits_by_threshold"]
    lines += ["", "Slopes in d (" + next(iter(next(iter(fits.values())).values()))["method"] + "): " + "; ".join(
        f"{sr} at {t}: {f['slope']:.2f} [{f['ci'][0]:.2f}, {f['ci'][1]:.2f}]" for sr, by in fits.items()
        for t, f in by.items()) + ".", "", f"Record `records/{rec['name']}.json`: `{rec['command']}`."]  # fmt: skip
    return "\n".join(lines) + "\n"


# seeds 300-304 (the docs' block), then 1000-1009: centred labels with the squared loss, then the correlation loss
CHI_RECORDS = ("w2s-chi-centred", "w2s-chi-centred-1000")
CHI_CORR_RECORDS = ("w2s-chi-centred-corr", "w2s-chi-centred-corr-1000")


def _chi_table(names: tuple[str, ...]) -> Callable[[Path], str]:
    return lambda root: _chi_centred_table(root, names)


def _chi_centred_table(root: Path, names: tuple[str, ...] = CHI_RECORDS) -> str:
    """docs/w2s.md "chi with the label mean removed": per point, the non-target group's final alignment with theta_2
    and with theta_1 (mean +- sample std over seeds) and the seeds captured (theta_1 > 0.5), on each recorded block."""
    recs = [load_record(n, root) for n in names]
    blocks = [f"seeds {r['config']['seed']}-{r['config']['seed'] + r['config']['n_seeds'] - 1}" for r in recs]
    lines = ["| N_2 | pi_2 | chi_2 | " + " | ".join(f"{b}: theta_2 / theta_1 (captured)" for b in blocks) + " |",
             "|---|---|---|" + "---|" * len(recs)]  # fmt: skip
    for i, p in enumerate(recs[0]["results"]["points"]):
        cells = []
        for r in recs:
            f = r["results"]["points"][i]["modes"]["w2s"]["final_per_seed"]
            t2, t1 = np.asarray(f["nontarget_alignment"]), np.asarray(f["nontarget_target_alignment"])
            cells.append(f"{t2.mean():.2f} +- {t2.std(ddof=1):.2f} / {t1.mean():.2f} +- {t1.std(ddof=1):.2f} "
                         f"({int((t1 > 0.5).sum())}/{t1.size})")  # fmt: skip
        pi = (p["params"].get("pi") or [1.0, 1.0])[1]
        lines.append(f"| {p['params']['group_sizes'][1]} | {pi:g} | {p['chi']:g} | " + " | ".join(cells) + " |")
    lines += ["", "Records " + ", ".join(f"`records/{n}.json`: `{r['command']}`" for n, r in zip(names, recs))
              + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _ode_fresh_table(rec: dict) -> str:
    """docs/w2s-scaling.md, the ODE against the simulation at the smallest step, on a block of seeds that table's
    settings were not read on: per seed ratio, mean with its 95 % t-interval."""
    r = rec["results"]["ode"]["w2s"]["escape_ratio"]
    cfg = rec["config"]
    per = ", ".join("-" if x is None else f"{x:.2f}" for x in r["per_seed"])
    n_note = f", {r['n']} seeds" if r["left_out"] else ""
    return (
        f"| eta_w2s (steps) | ratio ODE / simulation, seeds {cfg['seed']}-{cfg['seed'] + cfg['n_seeds'] - 1} | "
        "mean [95 % t-interval] | sample std |\n|---|---|---|---|\n"
        f"| {cfg['eta_w2s']:g} ({cfg['steps']:,}) | {per} | **{r['mean']:.2f}** [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"
        f"{n_note} | {r['std']:.2f} |\n\n"
        f"Record `records/{rec['name']}.json`: `{rec['command']}`.\n"
    )


def _rho_star_fresh_table(rec: dict) -> str:
    """docs/w2s.md "rho* against the simulated turn boundary": the h_2 + h_4 / correlation row on a fresh block."""
    r = rec["results"]
    found = [x["boundary_rho"] for x in r["per_seed"] if x["boundary_rho"] is not None]
    ci = mean_t_interval(found)
    seeds = f"{r['per_seed'][0]['seed']}-{r['per_seed'][-1]['seed']}"
    per = ", ".join("-" if x["boundary_rho"] is None else f"{x['boundary_rho']:.3f}" for x in r["per_seed"])
    return (
        f"| student, loss | rho* predicted | bisected boundary per seed ({seeds}) | mean +- sample std "
        "[95 % t-interval] | mean - rho* |\n|---|---|---|---|---|\n"
        f"| h_2 + h_4, correlation | **{r['rho_star']:.3f}** | {per} | **{ci['mean']:.3f}** +- {ci['std']:.3f} "
        f"[{ci['ci'][0]:.3f}, {ci['ci'][1]:.3f}] | {ci['mean'] - r['rho_star']:+.3f} |\n\n"
        f"Record `records/{rec['name']}.json`: `{rec['command']}` and `{r['theory_command']}`.\n"
    )


RACE_RECORDS = ("w2s-race", "w2s-race-1000")  # the race's seeds 0-2 (those the docs' table read), then 1000-1002


def _race_choice_table(root: Path) -> str:
    """docs/w2s.md "Theorem 2's race": per block of seeds, size and mode, the step grid, the step each cell chose
    (fastest median learn time), whether it lies on the grid's edge, and each seed's own fastest step."""
    lines = ["| seeds | s, mode | step grid | chosen step (cells) | on an edge | each seed's fastest step (cells) | "
             "median learn samples |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    cmds = []
    for name in RACE_RECORDS:
        rec = load_record(name, root)
        cmds.append(f"`{rec['command']}`")
        seed, n = rec["spec"]["base"].get("seed", 0), rec["spec"]["base"]["n_seeds"]
        groups: dict[tuple, list[dict]] = {}
        for r in rec["results"]["rows"]:
            groups.setdefault((r["s"], r["mode"]), []).append(r)
        for (s_, mode), rows in sorted(groups.items()):
            chosen = sorted({r["eta"] for r in rows})
            edge = sum(r["eta_on_edge"] for r in rows)
            pats = sorted({tuple(r["best_eta_per_seed"]) for r in rows}, key=str)
            learn = [r["learn_samples"] for r in rows if r["learn_samples"] is not None]
            lines.append(
                f"| {seed}-{seed + n - 1} | {s_}, {mode.upper()} | {', '.join(f'{e:g}' for e in rows[0]['eta_grid'])} "
                f"| {', '.join(f'{e:g}' for e in chosen)} ({len(rows)}) | {edge} of {len(rows)} | "
                + "; ".join("(" + ", ".join("-" if e is None else f"{e:g}" for e in p) + ")" for p in pats)
                + f" | {min(learn):,.0f}-{max(learn):,.0f} |"
            )
    lines += ["", "Records " + ", ".join(f"`records/{n}.json`" for n in RACE_RECORDS) + ": " + ", ".join(cmds) + "."]
    return "\n".join(lines) + "\n"


def _record_table(name: str, fn: Callable[[dict], str]) -> Callable[[Path], str]:
    return lambda root: fn(load_record(name, root))


# NAME: (the file its block is in, renderer(checkout root) -> markdown)
TABLES: dict[str, tuple[str, Callable[[Path], str]]] = {
    "key-results": ("README.md", _readme_results),
    "demo": ("docs/results/demo.md", _record_table("demo", _demo_table)),
    "demo-time": ("docs/results/demo.md", _record_table("demo", _demo_time)),
    "demo-base": ("docs/results/demo.md", _record_table("demo", _demo_base)),
    "demo-choice": ("docs/results/demo.md", _demo_choice),
    "demo-check": ("docs/results/demo.md", _record_table("demo-check", _demo_check_table)),
    "demo-check-bar": ("docs/results/demo.md", _record_table("demo-check", _demo_check_bar)),
    "verdict": ("docs/results/verdict.md", _record_table("verdict", _verdict_table)),
    "verdict-per-base": ("docs/results/verdict.md", _record_table("verdict", _verdict_per_base_table)),
    "verdict-pilot": ("docs/alternatives.md", _record_table("verdict-pilot", _decision_table)),
    "verdict-pilot-confirmatory": ("docs/alternatives.md", _record_table("verdict-pilot", _confirmatory_line)),
    "verdict-pilot-per-base": ("docs/alternatives.md", _record_table("verdict-pilot", _decision_per_base_table)),
    "verdict2": ("docs/alternatives.md", _record_table("verdict2", _decision_table)),
    "verdict2-confirmatory": ("docs/alternatives.md", _record_table("verdict2", _confirmatory_line)),
    "verdict2-answer": ("docs/alternatives.md", _record_table("verdict2", _decision_answer)),
    "verdict2-per-base": ("docs/alternatives.md", _record_table("verdict2", _decision_per_base_table)),
    "w2s-paper": ("docs/results/w2s-paper.md", _record_table("w2s-paper", _w2s_table)),
    "w2s-replication": ("docs/w2s.md", _replication_table),
    "w2s-race-choice": ("docs/w2s.md", _race_choice_table),
    "w2s-rho-star-fresh": ("docs/w2s.md", _record_table("w2s-rho-star-1000", _rho_star_fresh_table)),
    "w2s-ode-fresh": ("docs/w2s-scaling.md", _record_table("w2s-ode-fresh", _ode_fresh_table)),
    "w2s-chi-centred": ("docs/w2s.md", _chi_table(CHI_RECORDS)),
    "w2s-chi-centred-corr": ("docs/w2s.md", _chi_table(CHI_CORR_RECORDS)),
    "w2s-he6-sft": ("docs/w2s-scaling.md", _record_table("w2s-he6-sft", _he6_table)),
    "w2s-trained-teacher": ("docs/w2s.md", _record_table("w2s-trained-teacher", _trained_teacher_table)),
    "eval-cell-cost": ("docs/alternatives.md", _eval_cell_cost),
    "verdict2-cost": ("docs/alternatives.md", _study_cost),
    "w2s-compile": ("docs/w2s.md", _w2s_compile),
    "w2s-gram-free": ("docs/w2s.md", _w2s_gram_free),
    "w2s-step": ("docs/w2s-scaling.md", _w2s_step),
}


def doc_files(root: str | Path | None = None) -> list[str]:
    """The files whose table blocks are checked and rewritten: README.md and every docs/**/*.md, relative to
    `root`."""
    root = Path(root or repo_root())
    files = ["README.md"] if (root / "README.md").is_file() else []
    files += sorted(p.relative_to(root).as_posix() for p in (root / "docs").rglob("*.md"))
    return files


def verdict_summary(root: Path) -> str:
    """configs/toy/verdict-summary.json, what a comparison's report needs of the verdict to say it in its first
    line (`report.verdict_headline`): the verdict's lr and steps, each of its runs' settings and option, and each
    option's pooled interval and whether it is decided (both intervals on one side of 0)."""
    import dataclasses

    from anchorft.studies.testbed.compare_config import load_config

    rec = load_record("verdict", root)
    v = rec["results"]
    cfg = load_config("verdict")
    option = {r: r for r in v["pooled"] if r not in (v.get("picks") or {})}
    option.update({c: g for g, cands in (v.get("picks") or {}).items() for c in cands})
    runs = {}
    for r in cfg.runs:
        settings = {k: x for k, x in dataclasses.asdict(r).items() if x is not None and k != "name"}
        runs[r.name] = {"settings": settings, "option": option.get(r.name), "front": r.name in v["front"]}
    options = {}
    for o, p in v["pooled"].items():
        sides = [(p["low"], p["high"])] + ([(p["shared_items"]["low"], p["shared_items"]["high"])] if
                                            p.get("shared_items") else [])  # fmt: skip
        decided = "under" if all(h < 0 for _, h in sides) else "above" if all(lo > 0 for lo, _ in sides) else None
        options[o] = {"interval": f"{p['mean']:+.1f} {_interval(p)}", "decided": decided}
    summary = {
        "record": "records/verdict.json",
        "method": v.get("method", "first"),  # a verdict.json before methods were named is the first method's
        "bases": len(v["bases"]),
        "learning_rate": cfg.learning_rate,
        "max_steps": cfg.max_steps,
        "runs": runs,
        "options": options,
    }
    return json.dumps(summary, indent=1) + "\n"


# generated files other than tables: path -> renderer(checkout root) -> the file's text
FILES: dict[str, Callable[[Path], str]] = {"configs/toy/verdict-summary.json": verdict_summary}


def render(name: str, root: str | Path | None = None) -> str:
    """Table NAME rendered from its record."""
    return TABLES[name][1](Path(root or repo_root()))


def blocks(text: str) -> list[tuple[str, str]]:
    """(name, body) of every table block of a markdown text, in order."""
    return [(m.group("name"), m.group("body")) for m in BLOCK.finditer(text)]


def stale_tables(root: str | Path | None = None) -> list[str]:
    """One line per table whose block differs from its record's rendering, is missing from its file, or names no
    table: empty when the docs say what the records give."""
    root = Path(root or repo_root())
    problems = []
    for name, (file, _) in TABLES.items():
        found = [body for n, body in blocks((root / file).read_text(encoding="utf-8")) if n == name]
        if not found:
            problems.append(f"{file}: no block for table {name!r} (<!-- table: {name} --> ... <!-- /table -->)")
        elif any(body != render(name, root) for body in found):
            problems.append(f"{file}: table {name!r} differs from records/ (make docs-tables rewrites it)")
    for file, make in FILES.items():
        if not (root / file).is_file() or (root / file).read_text(encoding="utf-8") != make(root):
            problems.append(f"{file}: differs from records/ (make docs-tables writes it)")
    for file in doc_files(root):
        for n, _ in blocks((root / file).read_text(encoding="utf-8")):
            if n not in TABLES or TABLES[n][0] != file:
                problems.append(f"{file}: block {n!r} is no table of {file} (TABLES)")
    return problems


def _rendered_block(m: re.Match, file: str, root: Path) -> str:
    """A block rewritten from its record; a block that names no table of `file` is left as it is."""
    body = render(m["name"], root) if TABLES.get(m["name"], ("",))[0] == file else m["body"]
    return f"<!-- table: {m['name']} -->\n{body}<!-- /table -->"


def rewrite_tables(root: str | Path | None = None) -> list[str]:
    """Rewrite every table block of the docs from its record; returns the files changed."""
    root = Path(root or repo_root())
    changed = []
    for file in doc_files(root):
        path = root / file
        text = path.read_text(encoding="utf-8")
        new = BLOCK.sub(lambda m, file=file: _rendered_block(m, file, root), text)
        if new != text:
            write_text(path, new)
            changed.append(file)
    for file, make in FILES.items():
        text = make(root)
        if not (root / file).is_file() or (root / file).read_text(encoding="utf-8") != text:
            write_text(root / file, text)
            changed.append(file)
    return changed


# ---------------------------------------------------------------------------------------------------------------
# the drift alarm


def replay(rec: dict, root: str | Path | None = None) -> dict:
    """The replay of record `rec` on the code of now (`anchorft.studies.drift`), in the record's form."""
    from anchorft.studies import drift

    kind = next(iter(rec["replay"]))
    if kind == "toy":
        got = drift.toy_replay(rec["config"] if "finetune" in rec["replay"]["toy"] else
                               {**rec["config"], "runs": rec["config"]["runs"][:1]})  # fmt: skip
        return {"toy": got if "finetune" in rec["replay"]["toy"] else {k: got[k] for k in ("pretrain", "machine")}}
    if kind == "w2s":
        return {"w2s": drift.w2s_replay(rec["config"], rec["threads"]["torch"])}
    if kind == "verdict":
        from anchorft.studies.testbed.record import unpack_study

        with tempfile.TemporaryDirectory(prefix="anchorft-verdict-") as tmp:
            unpack_study(Path(root or repo_root()) / rec["study_record"], tmp)
            return {"verdict": drift.verdict_replay(tmp, rec["results"])}
    raise ValueError(f"record {rec['name']}: unknown replay {kind!r}")


def check_records(
    names: list[str] | None = None, root: str | Path | None = None, how: dict | None = None
) -> dict[str, list[str]]:
    """{record: the lines where its replay on the code of now differs from the recorded one} (empty: no drift),
    compared as `drift.compare_replays` decides for this machine's CPU kind; `how` (a dict) gets, per record, how."""
    from anchorft.studies.drift import compare_replays

    root = Path(root or repo_root())
    names = names or sorted(p.stem for p in (root / "records").glob("*.json"))
    out = {}
    for name in names:
        rec = load_record(name, root)
        out[name], said = compare_replays(rec["replay"], replay(rec, root))
        if how is not None:
            how[name] = said
    return out


def replay_again(
    names: list[str] | None = None, root: str | Path | None = None, amplifying: tuple[str, ...] = ()
) -> dict[str, str]:
    """Make the training replays of `names` (default: every record's) again on this machine's CPU kind, where they
    were made on another. Each is replayed and compared with the stored one as across kinds (drift.compare_replays);
    where they differ, it is drift and the record is left as it is (make it again), unless the record is named in
    `amplifying` (its replay amplifies rounding: the caller has shown the code unchanged since the stored replay
    held bit for bit) and differs in numbers only. Otherwise the new replay is stored with its kind and, as
    `across_kinds`, the measured largest relative difference from the stored one (beyond the tolerance: compared
    on its own kind only from then on). {record: what was done}."""
    from anchorft import provenance
    from anchorft.studies import drift

    root = Path(root or repo_root())
    names = names or sorted(p.stem for p in (root / "records").glob("*.json"))
    here, said, code = drift.machine_kind(), {}, provenance.git_state()
    for name in names:
        rec = load_record(name, root)
        kind = next(iter(rec["replay"]))
        if kind == "verdict" or rec["replay"][kind].get("machine") == here:
            said[name] = "kept (no training replay, or made on this kind)"
            continue
        now = replay(rec, root)
        rtol = math.inf if name in amplifying else drift.CROSS_MACHINE_RTOL
        lines = drift.differences(rec["replay"], now, rtol=rtol, skip=drift.NOT_COMPARED)
        if lines:
            said[name] = "left as it is: it drifted\n  " + "\n  ".join(lines)
            continue
        measured = drift.largest_relative_difference(rec["replay"], now)
        now[kind]["across_kinds"] = {
            "other": rec["replay"][kind].get("machine"),
            "largest_relative_difference": measured,
            "code": code["commit"],
            "dirty": code["dirty"],
            "date": datetime.date.today().isoformat(),
        }
        rec["replay"] = now
        write_json(root / "records" / f"{name}.json", rec, indent=1)
        said[name] = f"made again here; {measured:.2g} relative from the stored one"
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m anchorft.studies.records", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    t = sub.add_parser("tables", help="rewrite the docs' table blocks from records/ (--check: only say which differ)")
    t.add_argument("--check", action="store_true")
    c = sub.add_parser("check", help="the drift alarm: replay every record (or NAME ...) and compare")
    c.add_argument("names", nargs="*")
    a = sub.add_parser("replay-again", help="make the training replays again on this CPU kind (where they agree)")
    a.add_argument("names", nargs="*")
    a.add_argument("--amplifying", nargs="*", default=[], help="records whose replays amplify rounding across kinds")
    m = sub.add_parser("make", help="write records/NAME.json from a finished run folder")
    m.add_argument("kind", choices=("toy", "w2s", "race", "scaling", "chi", "rho-star", "verdict"))
    m.add_argument("name")
    m.add_argument("--from", dest="source", required=True, help="the run folder (verdict: its output folder)")
    m.add_argument("--command", required=True, help="the command that made it, as typed")
    m.add_argument("--study", help="verdict: the study record it was computed on (records/verdict)")
    m.add_argument("--code", help="verdict: the checkout that computed it (default: this one)")
    m.add_argument("--threads", type=int, help="w2s: the torch threads it ran on (default: its metrics.json's)")
    m.add_argument("--pretrain-replay-only", action="store_true", help="toy: replay the first base's pretraining only")
    m.add_argument("--timings", help="a JSON list of measured wall times to keep with the record")
    m.add_argument("--theory", help="rho-star: the JSON of `anchorft w2s theory ... --json` on the same seeds")
    m.add_argument("--theory-command", help="rho-star: that theory command, as typed")
    m.add_argument("--choice", help="w2s: the sweep folder whose rows chose this run's setting (kept as `choice`)")
    m.add_argument("--choice-command", help="w2s: the command of the --choice sweep, as typed")
    args = parser.parse_args(argv)
    root = repo_root()
    if args.what == "tables":
        if args.check:
            problems = stale_tables(root)
            print("\n".join(problems) or "every table matches its record")
            return 1 if problems else 0
        print("\n".join(f"rewrote {f}" for f in rewrite_tables(root)) or "every table already matches its record")
        return 0
    if args.what == "check":
        bad, how = 0, {}
        for name, lines in check_records(args.names or None, root, how).items():
            print(f"{name}: " + (f"no drift ({how[name]})" if not lines else "DRIFT\n  " + "\n  ".join(lines)))
            bad += bool(lines)
        return 1 if bad else 0
    if args.what == "replay-again":
        for name, said in replay_again(args.names or None, root, tuple(args.amplifying)).items():
            print(f"{name}: {said}")
        return 0
    more = {"timings": json.loads(args.timings)} if args.timings else {}
    if args.choice:
        res = json.loads((Path(args.choice) / "results.json").read_text())
        more["choice"] = {"command": args.choice_command, "rows": res["rows"],
                          "commit": (res.get("provenance") or {}).get("git_commit")}  # fmt: skip
    if args.kind == "toy":
        rec = make_toy_record(args.name, args.source, args.command, not args.pretrain_replay_only, **more)
    elif args.kind == "w2s":
        rec = make_w2s_record(args.name, args.source, args.command, args.threads, **more)
    elif args.kind == "race":
        rec = make_race_record(args.name, args.source, args.command, **more)
    elif args.kind == "scaling":
        rec = make_scaling_record(args.name, args.source, args.command, **more)
    elif args.kind == "chi":
        rec = make_chi_record(args.name, args.source, args.command, **more)
    elif args.kind == "rho-star":
        rec = make_rho_star_record(args.name, args.source, args.command, args.theory, args.theory_command, **more)
    else:
        rec = make_verdict_record(args.name, args.source, args.study, args.command, args.code)
    write_json(root / "records" / f"{args.name}.json", rec, indent=1)
    print(f"wrote records/{args.name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
