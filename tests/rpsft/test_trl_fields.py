"""The shipped table of TRL's flags (`anchorft/rpsft/trl_fields.json`) is the installed TRL's, and the short helps
read from it and from the configs' source are the ones the imported classes give."""

from __future__ import annotations

import json

import pytest

from anchorft.rpsft.trl_fields import TABLE_FILE, build_table


def test_the_shipped_table_is_the_installed_trl_s():
    """Regenerate with `python -m anchorft.rpsft.trl_fields` after a TRL upgrade."""
    shipped = json.loads(TABLE_FILE.read_text(encoding="utf-8"))
    built = json.loads(json.dumps(build_table()))  # tuples as lists, as the file holds them
    assert shipped["trl"] == built["trl"]
    for name, rows in built["classes"].items():
        assert shipped["classes"][name].keys() == rows.keys(), name
        changed = [k for k in rows if rows[k] != shipped["classes"][name][k]]
        assert changed == [], f"{name}: {changed[:5]} differ from the installed TRL"
    enum = shipped["classes"]["SFTConfig"]["lr_scheduler_type"]
    assert enum["type"] == "choice" and "cosine" in enum["choices"]


@pytest.mark.parametrize("command", ["train", "rl"])
def test_the_short_help_from_source_is_the_imported_classes_s(command, monkeypatch):
    """`anchorft train --help` and `rl --help` are built without TRL; with the table missing they import the
    classes: the text is the same."""
    import anchorft.commands.flags as flags
    import anchorft.commands.rl as rl

    help_of = flags.short_help if command == "train" else rl.short_help
    fast = help_of()
    monkeypatch.setattr(flags, "trl_table", lambda: {})
    assert help_of() == fast
