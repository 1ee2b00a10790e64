"""The guide's examples are tests: every shell and Python block of docs/guide/*.md runs as written, page by page,
each page in a fresh folder, in one interpreter (the imports paid once).

As in tests/test_readme.py, only what cannot run here in seconds is changed, each change listed below and applied
by exact text (a page edit that removes the text fails the test, so the lists follow the pages): a tiny local
model where a block names a hub model, the smoke testbed (pretrained once for the test run) for the testbed's real
presets, small problems and few steps. Lines that cannot run here (a GPU, a download, a cluster, a suite running a
suite) are listed in SKIPPED with the reason; lines that show a mistake are listed in EXPECTED_ERRORS with a piece
of the one line they must print (exit code 2). "Reproducing the paper on GPUs" is tests/test_guide_gpu.py's.

How a line runs: an `anchorft ...` line without shell syntax through `anchorft.cli.main` in the page's folder, a
Python block by `exec` (a page's blocks in one namespace, as in one interpreter), any other line (and every expected
error, through the console script) by bash in a subprocess. A page stops at its first failing line. SETUP names a
page's blocks that another page's reader has run first (its data).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide"
PAGES = sorted(p.name for p in GUIDE.glob("*.md"))
EXCLUDED_SECTIONS = {("fine-tune.md", "Reproducing the paper on GPUs")}  # tests/test_guide_gpu.py
SMALL_W2S = "d=32 s=4 n_log=4 batch_size=16 label_samples=512 center_samples=512 risk_samples=256"
SMOKE_DEMO = "--preset smoke --methods sft l2 rpsft-k2 --out runs/demo"
SMALL_W2S_PY = ", ".join(f'"{kv}"' for kv in SMALL_W2S.split())

# (page, text in a block, replacement): how a block is made fast; each must match
STAND_INS: list[tuple[str, str, str]] = [
    # a hub model -> a tiny local Llama; hundreds of steps -> two
    ("fine-tune.md", '"Qwen/Qwen2.5-3B-Instruct"', "TINY_MODEL"),
    ("fine-tune.md", "max_steps=200", "max_steps=2"),
    ("fine-tune.md", "--model_name_or_path Qwen/Qwen2.5-3B-Instruct", "--model_name_or_path TINY_MODEL"),
    ("fine-tune.md", "--max_steps 200 --save_steps 100", "--max_steps 2 --save_steps 1"),
    ("extend.md", '"Qwen/Qwen2.5-3B-Instruct"', "TINY_MODEL"),
    ("extend.md", "max_steps=200", "max_steps=2"),
    # the W2S paper preset (d = 1024, 8,000 steps) -> a small problem and a few steps
    ("w2s.md", "--out runs/w2s-paper", f"--out runs/w2s-paper --n-seeds 1 --steps 40 {SMALL_W2S}"),
    ("w2s.md", "--n-seeds 2 --steps 2000", f"--n-seeds 1 --steps 40 {SMALL_W2S}"),
    ("w2s.md", '["n_seeds=2", "modes=w2s,sft"]', f'["n_seeds=1", "modes=w2s,sft", "steps=40", {SMALL_W2S_PY}]'),
    ("troubleshooting.md", "--steps 100 d=64 s=8", f"--steps 40 {SMALL_W2S}"),
    ("extend.md", "{d: 64, s: 8,", "{d: 32, s: 4, n_log: 4,"),
    ("extend.md", "[{steps: 200}, {steps: 400}]", "[{steps: 20}, {steps: 40}]"),
    # the default testbed (minutes of pretraining) and the demo's comparison -> the smoke preset, pretrained once
    ("testbed.md", "toy pretrain --out runs/toy-base", "toy pretrain --preset smoke --out runs/toy-base"),
    ("extend.md", "toy pretrain --out runs/toy-base", "toy pretrain --preset smoke --out runs/toy-base"),
    ("testbed.md", "--preset demo --out runs/demo --workers 2", SMOKE_DEMO),
    ("testbed.md", '"demo", "runs/demo-python", methods=["sft", "l2-lam0.01"], workers=2',
     '"smoke", "runs/demo-python", methods=["sft", "l2"], progress=False'),
    ("testbed.md", "--front sft l2-lam0.0025 l2-lam0.01 l2-lam0.1 rpsft-k24", "--front sft l2"),
    ("testbed.md", "--runs sft l2-lam0.01 --alphas 0.25,0.5,0.75", "--runs sft --alphas 0.5"),
    # the verdict: 2,000 bootstrap replicates a base -> 20
    ("testbed.md", "--out runs/verdict/judged", "--boot 20 --out runs/verdict/judged"),
]  # fmt: skip
# (page, whole line) not run, with the reason
SKIPPED: dict[tuple[str, str], str] = {
    ("install.md", "make test"): "CI runs it: this test is part of it",
    ("install.md", "make test-dist"): "the distributed matrix, minutes of launches; .ci/run runs it after make test",
    ("install.md", "make docs"): ".ci/run builds the site (make docs) with its own extra",
    ("install.md", "make bench"): "every speed script, minutes; each prints a ratio when run by hand",
    ("install.md", "make mutants"): "mutation testing, hours (docs/testing.md)",
    ("install.md", ".venv/bin/pip install -e '.[peft]'"): "an install; the test's interpreter has the extra",
    ("install.md", "DS_BUILD_OPS=0 .venv/bin/pip install -e '.[deepspeed]'"): "an install; make test-dist's",
    ("w2s.md", "anchorft w2s sweep --kind chi --out runs/w2s-chi --workers 2"): "the whole sweep, minutes",
    ("fine-tune.md", 'accelerate launch --config_file "$(anchorft configs path accelerate/zero2)" -m anchorft.cli '
     "train --config rpsft/qwen2.5-3b-instruct/rpsft"): "GPUs and the hub model; make test-dist tests the launcher",
    ("fine-tune.md", "torchrun --nproc_per_node 2 -m anchorft.cli train --config configs/rpsft/example-tiny-cpu.yaml "
     "--model_name_or_path PATH --dataset data/train.jsonl --ddp_backend gloo"): "2 processes: make test-dist's",
    ("clusters.md", "anchorft toy compare --preset demo --out runs/demo --workers 2"): "minutes; testbed.md's, small",
    ("clusters.md", "anchorft w2s sweep --kind chi --out runs/w2s-chi --workers 2"): "the whole sweep, minutes",
    ("clusters.md", "ray start --head --port 6379 --num-cpus 32"): "a Ray cluster; make test-ray starts one",
    ("clusters.md", "ray start --address HEAD:6379 --num-cpus 32"): "a Ray cluster; make test-ray starts one",
    ("clusters.md", "anchorft toy compare --preset verdict --out /shared/runs/verdict --executor ray --address "
     "HEAD:6379"): "a Ray cluster and hours; make test-ray runs a study on one",
    ("clusters.md", "anchorft eval suite --models base=Qwen/Qwen2.5-3B-Instruct rpsft=/shared/runs/rpsft --out "
     "/shared/runs/suite --backend vllm --executor ray --address HEAD:6379"): "a Ray cluster with GPUs",
    ("clusters.md", 'RECIPE=rpsft/qwen2.5-7b-instruct/rpsft sbatch "$(anchorft configs path slurm/one-node)"'):
        "a SLURM cluster; make test-slurm simulates one",
    ("clusters.md", 'RECIPE=rpsft/llama-3.1-8b-instruct/rpsft TRAIN_ARGS="--per_device_train_batch_size 1" sbatch '
     "--nodes 2 my-slurm/multi-node.sbatch"): "a SLURM cluster; make test-slurm simulates one",
}  # fmt: skip
# (page, whole line): a piece of the one line it must print on stderr, with exit code 2
EXPECTED_ERRORS: dict[tuple[str, str], str] = {
    ("troubleshooting.md", "anchorft trian"): "did you mean 'train'?",
    ("troubleshooting.md", "anchorft w2s run --preset papr --out runs/w2s"): "did you mean 'paper'?",
    ("troubleshooting.md", "anchorft toy compare --preset smok --out runs/toy"): "did you mean 'smoke'?",
    ("troubleshooting.md", "anchorft train --config rpsft/qwen2.5-3b-instruct/rpsf --dry-run"):
        "did you mean 'rpsft/qwen2.5-3b-instruct/rpsft'?",
    ("troubleshooting.md", "anchorft train --model_name_or_path m --dataset d.jsonl --out o --learnig_rate 1e-5"):
        "did you mean --learning_rate?",
    ("troubleshooting.md", "anchorft w2s run --preset paper --out runs/w2s rho=2"): "rho=2.0: must be in [0, 1)",
    ("troubleshooting.md", "anchorft train --model_name_or_path m --dataset nope.jsonl --out o"):
        "--dataset: nope.jsonl does not exist",
    ("troubleshooting.md", f"anchorft w2s run --preset paper --out runs/w2s-small --n-seeds 1 --steps 40 {SMALL_W2S} "
     "rho=0.5"): "rho: 0.3 -> 0.5",
}  # fmt: skip
# page: (another page, its section) whose blocks run first in the page's folder, as a reader would have run them
SETUP: dict[str, tuple[str, str]] = {"extend.md": ("fine-tune.md", "The data")}
SHELL_SYNTAX = re.compile(r"[$`|;&<>*?'\"]")  # such a line runs in bash


def _sections(text: str) -> list[tuple[str, str, str]]:
    """(section heading, language, body) of each fenced block."""
    out, heading = [], ""
    for m in re.finditer(r"^#{2,3} ([^\n]+)$|^```(\w*)\n(.*?)^```$", text, flags=re.M | re.S):
        if m.group(1):
            heading = m.group(1).strip()
        else:
            out.append((heading, m.group(2), m.group(3)))
    return out


def page_blocks(page: str) -> list[tuple[str, str, str]]:
    blocks = _sections((GUIDE / page).read_text(encoding="utf-8"))
    return [b for b in blocks if (page, b[0]) not in EXCLUDED_SECTIONS and b[1] in ("python", "bash")]


def _shell_lines(body: str) -> list[str]:
    lines = []
    for raw in body.replace("\\\n", " ").splitlines():
        cmd = raw.split("  #")[0].strip()
        if cmd and not cmd.startswith("#"):
            lines.append(" ".join(cmd.split()))
    return lines


def _install_line_matches_makefile(cmd: str) -> bool:
    make = (ROOT / "Makefile").read_text()
    pkgs = re.findall(r"pip install (\S+)", cmd)
    return bool(pkgs) and all(p.strip("'") in make for p in pkgs)


def plan(page: str, tiny: str, used: set[int]) -> list[dict]:
    """The steps of a page, in order: what runs, how, and what it must return."""
    steps = []
    blocks = page_blocks(page)
    if page in SETUP:
        other, section = SETUP[page]
        blocks = [b for b in page_blocks(other) if b[0] == section] + blocks
    for heading, lang, body in blocks:
        for i, (p, old, new) in enumerate(STAND_INS):
            if p == page and old in body:
                body = body.replace(old, new)
                used.add(i)
        if lang == "python":
            steps.append({"kind": "python", "code": body.replace("TINY_MODEL", repr(tiny)), "where": heading})
            continue
        body = body.replace("TINY_MODEL", tiny)
        for line in _shell_lines(body):
            key = (page, line)
            if key in SKIPPED:
                continue
            if line.startswith("python3 -m venv"):
                assert _install_line_matches_makefile(line), f"{page}: the install line differs from the Makefile's"
                continue
            if key in EXPECTED_ERRORS:
                steps.append({"kind": "shell", "cmd": line, "expect": 2, "message": EXPECTED_ERRORS[key]})
            elif line == "make lint":  # with this interpreter's tools, not a new .venv
                prefix = Path(sys.executable).parent.parent
                cmd = f"make -C {ROOT} lint VENV={prefix} -o {prefix}/.installed-dev -o {prefix}/.installed-core"
                steps.append({"kind": "shell", "cmd": cmd, "expect": 0})
            elif line.startswith("anchorft ") and not SHELL_SYNTAX.search(line):
                steps.append({"kind": "anchorft", "argv": line.split()[1:], "expect": 0})
            else:
                steps.append({"kind": "shell", "cmd": line, "expect": 0})
    return steps


# runs the steps of every page in one interpreter: sys.argv[1] the plan, sys.argv[2] where the report goes
DRIVER = r"""
import contextlib, io, json, os, subprocess, sys, time, traceback
from anchorft.cli import main

pages, report = json.load(open(sys.argv[1])), {}
for page, spec in pages.items():
    os.chdir(spec["cwd"])
    done = report[page] = []
    namespace = {"__name__": "__main__"}  # a page's Python blocks share one namespace, as a reader's would
    for step in spec["steps"]:
        t0, out, err = time.time(), io.StringIO(), io.StringIO()
        if step["kind"] == "anchorft":
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    rc = main(step["argv"])
                except BaseException:
                    err.write(traceback.format_exc())
                    rc = 1
        elif step["kind"] == "python":
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    exec(compile(step["code"], page + ": " + step["where"], "exec"), namespace)
                    rc = 0
                except BaseException:
                    err.write(traceback.format_exc())
                    rc = 1
        else:
            r = subprocess.run(step["cmd"], shell=True, executable="/bin/bash", capture_output=True, text=True)
            rc, _ = r.returncode, (out.write(r.stdout), err.write(r.stderr))
        done.append({**step, "rc": rc, "seconds": round(time.time() - t0, 1), "stdout": out.getvalue()[-2000:],
                     "stderr": err.getvalue()[-4000:]})
        if rc != step.get("expect", 0):
            break
json.dump(report, open(sys.argv[2], "w"))
"""


def run_guide(root: Path, smoke_cache: Path, tiny: str) -> dict:
    """Every page's steps in one interpreter, each page in its folder under `root`: {page: the steps it ran}."""
    used: set[int] = set()
    pages = {}
    for page in PAGES:
        cwd = root / page.removesuffix(".md")
        cwd.mkdir()
        (cwd / "records").symlink_to(ROOT / "records")  # the blocks run from a checkout: the verdict's record
        pages[page] = {"cwd": str(cwd), "steps": plan(page, tiny, used)}
    unused = [STAND_INS[i][:2] for i in range(len(STAND_INS)) if i not in used]
    assert not unused, f"stand-ins that no longer match the guide: {unused}"
    (root / "plan.json").write_text(json.dumps(pages))
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["ANCHORFT_CACHE"] = str(smoke_cache)  # the smoke base the testbed's blocks use, pretrained once
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, "-c", DRIVER, str(root / "plan.json"), str(root / "report.json")], env=env,
                       capture_output=True, text=True, timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    report = json.loads((root / "report.json").read_text())
    for page in PAGES:
        assert len(report[page]) <= len(pages[page]["steps"])
        report[page] = {"ran": report[page], "planned": len(pages[page]["steps"])}
    return report


def page_failures(page: str, ran: list[dict], planned: int) -> list[str]:
    """What went wrong on a page: a step's exit code or message, or a page stopped early."""
    out = []
    for step in ran:
        what = step["code"] if step["kind"] == "python" else (step.get("cmd") or " ".join(["anchorft", *step["argv"]]))
        if step.get("message") is not None:
            lines = step["stderr"].strip().splitlines()
            if step["rc"] != 2 or step["message"] not in step["stderr"] or len(lines) != 1:
                out.append(f"{page}: {what}: expected one line with {step['message']!r}, exit 2; got rc {step['rc']}:"
                           f"\n{step['stderr']}")  # fmt: skip
        elif step["rc"] != 0:
            out.append(f"{page}: {what}\nfailed (rc {step['rc']}):\n{step['stdout']}\n{step['stderr']}")
    if not out and len(ran) != planned:
        out.append(f"{page}: stopped after {len(ran)} of {planned} steps")
    return out


def test_every_block_of_the_guide_runs(tmp_path, smoke_cache, tiny_model_dir):
    """One test for every page (one interpreter for all: under pytest-xdist a split would import twice)."""
    report = run_guide(tmp_path, smoke_cache, str(tiny_model_dir))
    failures = [f for page in PAGES for f in page_failures(page, report[page]["ran"], report[page]["planned"])]
    assert not failures, "\n\n".join(failures)
    # what the pages promise they write
    assert (tmp_path / "fine-tune" / "runs" / "rpsft" / "metrics.json").is_file()
    assert (tmp_path / "fine-tune" / "runs" / "l2" / "anchorft-run.json").is_file()
    assert (tmp_path / "w2s" / "runs" / "w2s-paper" / "alignment.png").is_file()
    for f in ("report.md", "results.json", "tradeoff.png"):
        assert (tmp_path / "testbed" / "runs" / "demo" / f).is_file(), f
    assert (tmp_path / "testbed" / "runs" / "verdict" / "judged" / "verdict.md").is_file()
    assert (tmp_path / "extend" / "runs" / "eval-mine" / "metrics.json").is_file()
    marker = json.loads((tmp_path / "troubleshooting" / "runs" / "w2s-small" / "anchorft-run.json").read_text())
    assert marker["config"]["rho"] == 0.5  # replaced by --overwrite


def test_every_skip_and_expected_error_names_a_line_of_its_page():
    lines = {(page, line) for page in PAGES for _, lang, body in page_blocks(page) if lang == "bash"
             for line in _shell_lines(_stand_ins_applied(page, body))}  # fmt: skip
    stale = sorted((set(SKIPPED) | set(EXPECTED_ERRORS)) - lines)
    assert not stale, f"listed lines no longer in the guide: {stale}"
    assert all(page in PAGES for page, _ in SKIPPED), "a skip names a page that is gone"


def _stand_ins_applied(page: str, body: str) -> str:
    for p, old, new in STAND_INS:
        if p == page:
            body = body.replace(old, new)
    return body


def test_every_page_of_the_guide_is_in_the_site_and_has_a_runnable_block():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in PAGES:
        assert f"guide/{page}" in nav, f"docs/guide/{page} is not in mkdocs.yml's nav"
    runnable = [p for p in PAGES if page_blocks(p)]
    assert set(PAGES) - set(runnable) <= {"index.md"}, "a task page without a block to run"
