"""Adding a method is one row of the methods table: a row registered here, and nothing else, is a method of every
part that reads the table (the configs' checks, the command-line choices, the RL anchor, the testbed's runs and
sweeps, the memory estimate)."""

from __future__ import annotations

import pytest

from anchorft.rpsft import methods as mt

THROWAWAY = mt.Method(
    "throwaway",
    "NLL + a top-k subspace anchor (a row defined in this test)",
    anchored=True,
    sweep_keys=("anchor_rank", "anchor_lambda", "learning_rate"),
)


@pytest.fixture
def throwaway():
    mt.register(THROWAWAY)
    yield THROWAWAY
    del mt.METHODS[THROWAWAY.name]


def _everywhere(tmp_path, rp=None) -> dict:
    """What each part of the package makes of the method `throwaway` (an error is part of the answer)."""
    from trl import TrlParser

    from anchorft.commands import rl as rl_cmd
    from anchorft.commands import toy_rl
    from anchorft.rpsft.config import RPSFTConfig, ScriptArguments
    from anchorft.rpsft.dapo_config import DAPOConfig
    from anchorft.rpsft.estimate import estimated_methods
    from anchorft.studies.testbed.compare import _train_args
    from anchorft.studies.testbed.compare_config import expand_sweeps, load_config
    from anchorft.studies.testbed.rl_stage import RLStageSettings

    name, seen = THROWAWAY.name, {}

    def attempt(key, fn):
        try:
            seen[key] = fn()
        except (ValueError, SystemExit) as e:
            seen[key] = e

    out = str(tmp_path)
    attempt("train config", lambda: RPSFTConfig(output_dir=out, method=name, anchor_rank=3).method_spec)
    attempt("train flag", lambda: TrlParser((ScriptArguments, RPSFTConfig)).parse_args_and_config(
        ["--output_dir", out, "--method", name])[1].method)  # fmt: skip
    attempt("rl config", lambda: DAPOConfig(anchor_method=name).anchor_spec)
    attempt("rl flag", lambda: rl_cmd.parse(["--model", "m", "--anchor_method", name])[1].anchor_method)
    attempt("toy rl flag", lambda: toy_rl._parser().parse_args(["--compare", "c", "--anchor-method", name]))
    attempt("toy rl settings", lambda: RLStageSettings(anchor_method=name).validate())
    cfg = load_config({"preset": "smoke", "runs": [{"name": "t", "method": name, "anchor_rank": 4}]})
    attempt("testbed run", cfg.validate)
    attempt("testbed sweep", lambda: [r.name for r in expand_sweeps(cfg.runs, ["anchor_rank=2,3"])])
    attempt("testbed trainer args", lambda: _train_args(cfg, cfg.runs[0], 0, tmp_path / "t").anchor_rank)
    seen["memory estimate"] = name in estimated_methods()
    return seen


def test_a_row_of_the_table_is_a_method_everywhere(throwaway, tmp_path, rp):
    seen = _everywhere(tmp_path)
    assert seen["train config"] is throwaway and seen["train flag"] == "throwaway"
    assert seen["rl config"] is throwaway and seen["rl flag"] == "throwaway"
    assert seen["toy rl flag"].anchor_method == "throwaway" and seen["toy rl settings"] is None
    assert seen["testbed run"] is None and seen["testbed sweep"] == ["t-k2", "t-k3"]
    assert seen["testbed trainer args"] == 4 and seen["memory estimate"]
    # the RL anchor is the table's: an anchor below full rank (not l2's), the same as rpsft's at that rank
    from anchorft.rpsft.dapo_config import DAPOConfig
    from anchorft.rpsft.rl import build_rl_anchor

    model = rp.tiny_model("llama", 300)
    mine = build_rl_anchor(model, DAPOConfig(anchor_method="throwaway", anchor_rank=3))
    ref = build_rl_anchor(model, DAPOConfig(anchor_method="rpsft", anchor_rank=3))
    assert mine.ranks == ref.ranks and not all(e.fallback for e in mine.entries)


def test_a_method_not_in_the_table_is_refused_everywhere(tmp_path):
    seen = _everywhere(tmp_path)
    refused = {k for k, v in seen.items() if isinstance(v, (ValueError, SystemExit)) or v is False}
    assert refused == set(seen)
