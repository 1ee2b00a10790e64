"""`anchorft data benchmarks`: the release's evaluation files, copied (--from) or downloaded, SHA-256 checked.

No network here: the download path is exercised through file:// URLs (urllib serves them like https://)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from anchorft.cli import main
from anchorft.data.benchmarks import FILES, OPTIONAL, fetch_benchmarks


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()  # independent of the module's streamed hashing


def test_manifest_matches_the_documented_sizes_and_gpqa_is_optional():
    assert len(FILES) == 20 and not any("gpqa" in p and "super" not in p for p in FILES)
    assert set(OPTIONAL["gpqa"]) == {"ood/gpqa.jsonl", "ood/gpqa_test.jsonl"}
    assert all(len(d) == 64 and size > 0 for size, d in FILES.values())


def test_from_reproduces_the_checked_files(bench_root, tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["data", "benchmarks", "--from", str(bench_root), "--out", str(out)]) == 0
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*.jsonl"))
    assert written == sorted(FILES)  # no GPQA unless asked for by name
    for rel, (size, digest) in FILES.items():
        assert (out / rel).stat().st_size == size
        assert _digest(out / rel) == _digest(bench_root / rel) == digest
    assert "20 files" in capsys.readouterr().out
    # a second run keeps the checked files
    assert main(["data", "benchmarks", "--from", str(bench_root), "--out", str(out)]) == 0
    assert "already there, checked" in capsys.readouterr().out


def _copy_with_one_changed_byte(bench_root: Path, dest: Path, rel: str) -> None:
    shutil.copytree(bench_root, dest, ignore=shutil.ignore_patterns("*.md"))
    data = bytearray((dest / rel).read_bytes())
    data[10] ^= 1
    (dest / rel).write_bytes(bytes(data))


def test_a_mismatch_is_refused_and_not_written(bench_root, tmp_path, capsys):
    src, out = tmp_path / "src", tmp_path / "out"
    _copy_with_one_changed_byte(bench_root, src, "id/math500.jsonl")
    assert main(["data", "benchmarks", "--from", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "id/math500.jsonl" in err and "SHA-256" in err and "refused" in err
    assert not (out / "id" / "math500.jsonl").exists()
    assert not list((out / "id").glob(".tmp-*"))


def test_an_existing_file_with_another_hash_is_refused_unless_overwrite(bench_root, tmp_path):
    out = tmp_path / "out"
    (out / "id").mkdir(parents=True)
    (out / "id" / "aime-24.jsonl").write_text("not the release's file\n")
    with pytest.raises(ValueError, match="another SHA-256"):
        fetch_benchmarks(out, source=bench_root, log=lambda s: None)
    fetch_benchmarks(out, source=bench_root, overwrite=True, log=lambda s: None)
    assert _digest(out / "id" / "aime-24.jsonl") == FILES["id/aime-24.jsonl"][1]


def test_download_path_checks_each_file(bench_root, tmp_path):
    out = tmp_path / "out"
    done = fetch_benchmarks(out, base_url=bench_root.resolve().as_uri(), log=lambda s: None)
    assert done == {rel: d for rel, (_, d) in FILES.items()}
    bad = tmp_path / "bad"
    _copy_with_one_changed_byte(bench_root, bad, "ood/arc_c.jsonl")
    with pytest.raises(ValueError, match="ood/arc_c.jsonl"):
        fetch_benchmarks(tmp_path / "out2", base_url=bad.resolve().as_uri(), log=lambda s: None)
    assert not (tmp_path / "out2" / "ood" / "arc_c.jsonl").exists()


def test_offline_download_names_the_url_and_from_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    """No network: one line naming the file's URL and --from DIR; no folder left behind (here, or in the user data
    folder when --out is not given)."""
    import urllib.error
    import urllib.request

    from anchorft.cli import main

    def offline(*a, **k):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    out = tmp_path / "bench"
    assert main(["data", "benchmarks", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--from DIR" in err and "https://" in err, err
    assert not out.exists()
    monkeypatch.setenv("ANCHORFT_BENCHMARKS", str(tmp_path / "default"))
    assert main(["data", "benchmarks"]) == 2 and not (tmp_path / "default").exists()


def test_gpqa_only_by_name(bench_root, tmp_path, capsys):
    rc = main(["data", "benchmarks", "--from", str(bench_root), "--out", str(tmp_path / "o"), "--include", "gpqa"])
    assert rc == 2 and "gpqa" in capsys.readouterr().err  # not in the mirrored copy: asked for, so it is needed


def test_default_folder_is_the_variable_or_the_user_data_folder(monkeypatch):
    from anchorft.eval.benchmarks import benchmarks_dir

    monkeypatch.setenv("ANCHORFT_BENCHMARKS", "/some/where")
    assert benchmarks_dir() == Path("/some/where")
    monkeypatch.delenv("ANCHORFT_BENCHMARKS")
    from platformdirs import user_data_dir

    assert benchmarks_dir() == Path(user_data_dir("anchorft")) / "benchmarks"
    assert "shared" not in benchmarks_dir().parts
