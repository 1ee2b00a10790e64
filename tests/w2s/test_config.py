from pathlib import Path

import pytest

from anchorft.w2s.config import PRESET_DIR, W2SConfig, apply_overrides, load_config


def test_defaults_are_the_documented_ones():
    c = W2SConfig().validate()
    assert (c.d, c.s, c.n_tasks, c.rho, c.group_sizes, c.c) == (1024, 128, 2, 0.3, [32, 128], 0.3)
    assert (c.activation, c.link, c.weak_neurons, c.weak_alignment, c.clip) == (
        "he2+he4",
        "he4",
        16,
        0.95,
        2.0,
    )


def test_overrides_coerce_types():
    c = apply_overrides(W2SConfig(), ["steps=1e3", "rho=0.5", "group_sizes=8,16", "link=he3", "loss=correlation"])
    assert c.steps == 1000 and isinstance(c.steps, int)
    assert c.rho == 0.5 and c.group_sizes == [8, 16] and c.link == "he3" and c.loss == "correlation"


def test_unknown_key_and_bad_value():
    with pytest.raises(ValueError, match="unknown w2s config key 'nope'"):
        apply_overrides(W2SConfig(), ["nope=1"])
    with pytest.raises(ValueError, match="steps"):
        apply_overrides(W2SConfig(), ["steps=1.5"])
    with pytest.raises(ValueError, match="key=value"):
        apply_overrides(W2SConfig(), ["steps"])


@pytest.mark.parametrize(
    "override, field",
    [
        ({"s": 2048}, "s"),
        ({"s": 600}, "s"),  # 2 subspaces of 600 do not fit in d = 1024
        ({"rho": 1.0}, "rho"),
        ({"rho": -0.1}, "rho"),
        ({"lambda_kappa": 1.5}, "lambda_kappa"),
        ({"lambda_kappa": -0.1}, "lambda_kappa"),
        ({"steps": 0}, "steps"),
        ({"eta_w2s": 0.0}, "eta_w2s"),
        ({"eta_sft": -1.0}, "eta_sft"),
        ({"activation": "swish"}, "activation"),
        ({"link": "sin"}, "link"),
        ({"loss": "hinge"}, "loss"),
        ({"group_sizes": [4]}, "group_sizes"),
        ({"modes": ["rl"]}, "modes"),
    ],
)
def test_bad_input_names_the_field(override, field):
    with pytest.raises(ValueError, match=field):
        apply_overrides(W2SConfig(), override).validate()


def test_presets_load_by_name_and_path_and_start_with_their_command():
    presets = sorted(PRESET_DIR.glob("*.yaml"))
    assert any(p.stem == "paper" for p in presets)
    for p in presets:
        first = Path(p).read_text().splitlines()[0]
        assert first.startswith("# anchorft w2s "), p
    a = load_config("paper")
    b = load_config(str(PRESET_DIR / "paper.yaml"))
    assert a == b and a.d == 1024 and a.s == 128 and a.n_seeds == 3
    with pytest.raises(ValueError, match="not found"):
        load_config("no-such-preset")


def test_only_the_target_link_is_a_setting():
    """The other tasks enter through theta_k and pi_k only: a list of links is refused, naming `link`."""
    with pytest.raises(ValueError, match="did you mean 'link'"):
        apply_overrides(W2SConfig(), {"links": ["he4", "he4"]})
    assert apply_overrides(W2SConfig(), ["link=he6"]).link == "he6"


def test_a_preset_names_its_base_or_is_a_list_of_presets(tmp_path):
    small = tmp_path / "small.yaml"
    small.write_text("# anchorft w2s run --preset small.yaml --out x\nd: 256\ns: 32\n")
    child = tmp_path / "child.yaml"
    child.write_text(f"# anchorft w2s run --preset child.yaml --out x\npreset: [paper, {small}]\nsteps: 100\n")
    assert load_config([str(small)]) == load_config(None, {"d": 256, "s": 32})
    assert load_config(["paper", str(small)]) == load_config("paper", {"d": 256, "s": 32})
    assert load_config([str(small), "paper"]) == load_config("paper")  # later presets win key by key
    assert load_config(str(child)) == load_config("paper", {"d": 256, "s": 32, "steps": 100})
    loop = tmp_path / "loop.yaml"
    loop.write_text(f"preset: {child}\n")
    child.write_text(f"preset: {loop}\n")
    with pytest.raises(ValueError, match="cycle"):
        load_config(str(child))
