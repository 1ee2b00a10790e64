"""The wheel's layout: every package under src/ is listed, configs/ ships as anchorft/configs, presets resolve."""

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None

import pytest

from anchorft.resources import configs_dir

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_pyproject_lists_every_package_and_maps_configs():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT / "src").parts) for p in (ROOT / "src").rglob("__init__.py")}
    assert set(cfg["packages"]) == found | {"anchorft.configs"}
    assert cfg["package-dir"] == {"": "src", "anchorft.configs": "configs"}
    kinds = {p.suffix for p in (ROOT / "configs").rglob("*") if p.is_file()}
    assert kinds <= {"." + g.rsplit(".", 1)[1] for g in cfg["package-data"]["anchorft.configs"]}


def test_configs_dir_from_a_checkout_is_the_repository_configs():
    assert configs_dir("w2s") == ROOT / "configs" / "w2s"
    assert (configs_dir("w2s") / "paper.yaml").is_file()
    assert (configs_dir("toy") / "smoke.yaml").is_file()


def test_presets_and_model_configs_are_found_through_it():
    from anchorft.dataclass_yaml import resolve_presets
    from anchorft.rpsft.stand_in import find_model_config
    from anchorft.studies.testbed.compare_config import PRESETS
    from anchorft.w2s.config import PRESET_DIR

    origin: dict = {}
    resolve_presets("paper", PRESET_DIR, origin=origin)
    assert str((configs_dir("w2s") / "paper.yaml").resolve()) in origin.values()
    assert "smoke" in PRESETS
    found = find_model_config("meta-llama/Llama-3.1-8B-Instruct")
    assert found == str(configs_dir("models") / "llama-3.1-8b-instruct.json")


def test_python_dash_m_anchorft(capsys, monkeypatch):
    import runpy

    monkeypatch.setattr(sys, "argv", ["anchorft", "--version"])
    with pytest.raises(SystemExit) as e:
        runpy.run_module("anchorft", run_name="__main__")
    assert e.value.code == 0
    assert capsys.readouterr().out.strip()
