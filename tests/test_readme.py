"""README.md's examples are tests: every Python and shell block runs as written, in a fresh folder.

Only what cannot run here in seconds is changed, each change listed below and applied by exact text (a README
edit that removes the text fails the test, so the list follows the README): a tiny local model where a block
names a hub model, the smallest preset / fewest steps / fewest bootstrap replicates where a block would take
minutes. Not run here: `make demo` and `make test` (CI runs both itself: a suite never runs a suite), the lines
listed in SKIPPED with the reason. The README stays a screen or two: at most 90 lines, none over 200 characters,
and it leads with the two commands.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXCLUDED_SECTIONS: tuple[str, ...] = ()  # the paper's GPU runs: docs/guide/fine-tune.md, tests/test_guide_gpu.py
MAX_LINES, MAX_WIDTH = 90, 200

# (text in a block, replacement): how a block is made fast; each must match
STAND_INS: list[tuple[str, str]] = [
    # the W2S paper preset (d = 1024, 8000 steps x 3 seeds) -> a few steps of a small problem
    (
        '["n_seeds=3"]',
        '["n_seeds=1", "d=32", "s=4", "steps=40", "n_log=4", "batch_size=16", "label_samples=512", '
        '"center_samples=512", "risk_samples=256"]',
    ),  # fmt: skip
    ('"Qwen/Qwen2.5-3B-Instruct"', "TINY_MODEL"),  # a hub model -> a tiny local Llama
    ("--preset demo --out runs/demo", "--preset smoke --methods sft rpsft-k2 --out runs/demo"),
    ("--out runs/verdict/check", "--boot 20 --out runs/verdict/check"),  # 2,000 bootstrap replicates a base -> 20
]
# whole lines not run, with the reason
SKIPPED: dict[str, str] = {
    "make demo": "runs the comparison for minutes; CI's demo job",
    "make test": "CI runs it: this test is part of it",
}


def _sections(text: str) -> list[tuple[str, str, str]]:
    """(section heading, language, body) of each fenced block."""
    out, heading = [], ""
    for m in re.finditer(r"^## ([^\n]+)$|^```(\w*)\n(.*?)^```$", text, flags=re.M | re.S):
        if m.group(1):
            heading = m.group(1).strip()
        else:
            out.append((heading, m.group(2), m.group(3)))
    return out


def readme_blocks() -> list[tuple[str, str, str]]:
    return [b for b in _sections(README.read_text()) if b[0] not in EXCLUDED_SECTIONS and b[1] in ("python", "bash")]


def _apply_stand_ins(body: str, used: set[int], tiny: str) -> str:
    for i, (old, new) in enumerate(STAND_INS):
        if old in body:
            body = body.replace(old, new)
            used.add(i)
    return body.replace("TINY_MODEL", repr(tiny) if "import" in body else tiny)


def _shell_lines(body: str) -> list[str]:
    lines = []
    for raw in body.replace("\\\n", " ").splitlines():
        cmd = raw.split("  #")[0].strip()
        if cmd and not cmd.startswith("#"):
            lines.append(cmd)
    return lines


def _install_line_matches_makefile(cmd: str) -> bool:
    """The install line is what `make test` runs first (the Makefile's recipe): the same pip installs."""
    make = (ROOT / "Makefile").read_text()
    pkgs = re.findall(r"pip install (\S+)", cmd)
    return bool(pkgs) and all(p.strip("'") in make for p in pkgs)


@pytest.fixture
def env(tmp_path, smoke_cache) -> dict:
    bin_dir = str(Path(sys.executable).parent)
    e = dict(os.environ)
    e["PATH"] = bin_dir + os.pathsep + e.get("PATH", "")
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("ANCHORFT_CACHE", str(smoke_cache))  # the smoke base the toy block uses, pretrained once
    e["OMP_NUM_THREADS"] = "1"
    e["HF_HUB_OFFLINE"] = "1"
    return e


def _training_set(cwd: Path) -> None:
    """What `anchorft data openr1-math --out data/train_openr1_4k` writes, a few rows of it."""
    import json

    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {a} + {a}?"}],
            "completion": [{"role": "assistant", "content": f"The answer is \\boxed{{{2 * a}}}."}],
        }
        for a in range(8)
    ]
    d = cwd / "data" / "train_openr1_4k"
    d.mkdir(parents=True)
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_every_readme_block_runs(tmp_path, env, tiny_model_dir):
    blocks = readme_blocks()
    langs = [lang for _, lang, _ in blocks]
    assert langs.count("python") >= 2 and langs.count("bash") >= 3, "the README's examples were not found"
    cwd = tmp_path / "work"
    cwd.mkdir()
    _training_set(cwd)
    (cwd / "records").symlink_to(ROOT / "records")  # the blocks run from a checkout: the verdict's study record
    used: set[int] = set()
    ran: list[str] = []
    for heading, lang, body in blocks:
        code = _apply_stand_ins(body, used, str(tiny_model_dir))
        if lang == "python":
            r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)
            assert r.returncode == 0, f"README python block ({heading}) failed:\n{code}\n{r.stderr[-3000:]}"
            ran.append(f"python: {body.splitlines()[0]}")
            continue
        for cmd in _shell_lines(code):
            if cmd in SKIPPED:
                continue
            if cmd.startswith("python3 -m venv"):
                assert _install_line_matches_makefile(cmd), f"the install line differs from the Makefile's: {cmd}"
                continue
            if cmd == "make lint":  # with this interpreter's tools, not a new .venv
                prefix = Path(sys.executable).parent.parent
                cmd = f"make lint VENV={prefix} -o {prefix}/.installed-dev -o {prefix}/.installed-core"
            r = subprocess.run(cmd, shell=True, cwd=ROOT if cmd.startswith("make") else cwd, env=env,
                               capture_output=True, text=True)  # fmt: skip
            assert r.returncode == 0, f"README command ({heading}) failed: {cmd}\n{r.stdout[-2000:]}{r.stderr[-3000:]}"
            ran.append(cmd)
    unused = [STAND_INS[i][0] for i in range(len(STAND_INS)) if i not in used]
    assert not unused, f"stand-ins that no longer match the README: {unused}"
    lines = {cmd for _, lang, body in blocks if lang == "bash" for cmd in _shell_lines(body)}
    assert not set(SKIPPED) - lines, f"skipped lines no longer in the README: {sorted(set(SKIPPED) - lines)}"
    # what the examples promise they write
    assert (cwd / "runs" / "w2s-paper" / "anchorft-run.json").is_file()
    assert (cwd / "runs" / "rpsft").is_dir()
    for f in ("report.md", "results.json", "tradeoff.png"):
        assert (cwd / "runs" / "demo" / f).is_file(), f
    assert (cwd / "runs" / "verdict" / "check" / "verdict.md").is_file()
    assert any(c.startswith("anchorft toy verdict") for c in ran)


def test_sections_are_found():
    heads = set(re.findall(r"^## (.+)$", README.read_text(), flags=re.M))
    assert {"Install", "Quickstart", "Key results", "Documentation"} <= heads
    langs = [lang for _, lang, _ in readme_blocks()]
    assert langs.count("python") == 2, "the simulator's and the trainer's quickstarts"


def test_the_readme_is_a_screen_or_two_and_leads_with_the_two_commands():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES})"
    wide = [(i + 1, len(line)) for i, line in enumerate(lines) if len(line) > MAX_WIDTH]
    assert not wide, f"README.md lines over {MAX_WIDTH} characters (line, width): {wide}"
    first = readme_blocks()[0]
    assert [c.split()[:2] for c in _shell_lines(first[2])] == [["make", "demo"], ["make", "test"]]
    assert text.index("```bash") < text.index("\n## "), "the two commands come before the first section"
