"""The RPSFT paper's evaluation files: fetched from the public release at a pinned commit, each checked by SHA-256.

The files are the release's `evaluation/data/` folder (github jinhangzhan/RPSFT) at commit `RELEASE_COMMIT`,
kept under the same relative paths (`id/...`, `ood/...`). Every file is written only after its SHA-256 equals
the one pinned below; a mismatch is refused and nothing is written for it. GPQA is fetched only when asked for by
name: its authors ask that its items not be redistributed in plain text.

`fetch_benchmarks(out)` downloads (raw.githubusercontent.com serves a file of a commit at OWNER/REPO/COMMIT/PATH);
`fetch_benchmarks(out, source=DIR)` copies and checks a folder already on disk (a copy of `evaluation/data/`, or a
clone of the release).
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

from anchorft.io import atomic_path

__all__ = ["RELEASE_REPO", "RELEASE_COMMIT", "RELEASE_URL", "FILES", "OPTIONAL", "sha256", "fetch_benchmarks"]

RELEASE_REPO = "jinhangzhan/RPSFT"
RELEASE_COMMIT = "ea9437dd85d011542adc93e8627050a8debf6224"
RELEASE_URL = f"https://raw.githubusercontent.com/{RELEASE_REPO}/{RELEASE_COMMIT}/evaluation/data"

# path under evaluation/data/ -> (bytes, SHA-256)
FILES: dict[str, tuple[int, str]] = {
    "id/aime-2025.jsonl": (1229600, "54de46fb5bf2458cca65e8ec1c04e782188f414ccb8395b51709f3fa8dc0d6ca"),
    "id/aime-24.jsonl": (18645, "7b27774168a9455cf6159788b68c07a447b2b11e7f21a3817a323c9454412d6f"),
    "id/aime-25.jsonl": (38425, "18bce99df2c334ecb0636164066f73c2270acdbb0618f393e08eea5590bb7985"),
    "id/amc.jsonl": (37711, "5185c363ec84abafc0f39ba1cce819fb8ad8e22b652802f051587509bef85dd4"),
    "id/math500.jsonl": (686352, "ce1a35a69e2c7b38314186bcf0da0295f23062dfc7f6030fa1f1ceaf47bef1b4"),
    "id/minerva.jsonl": (445292, "15e807a12c22e983ceabce9db6634e388c43881bc49dd9eb6237cbcc956d1a17"),
    "id/olympiadBench.jsonl": (1892123, "d694f7274679e177239dd98358f19c9af0e2aef48789483217aa5099463b1d04"),
    "ood/arc_c.jsonl": (682609, "69fe1bae406d8997d69bc021b3b4a523ae39383759de12e526b0bd23dc395c1c"),
    "ood/arc_c_test.jsonl": (29574, "2e48fc7640bc75a1679cbfa707dfaafc8866c37ad940cd1c91624dc457334a69"),
    "ood/commonsenseqa.jsonl": (900224, "c5549eda182d7c87949ff0ee7b24f3334b39efd18cfb91eab7e2cf2afc9c26c7"),
    "ood/commonsenseqa_test.jsonl": (38270, "9f923f4903d937306417ea23170575284c92f5f580df8be2eea0f34e51e8b24f"),
    "ood/ifeval_loose.jsonl": (753889, "e175fcc05a60e8c8115db993a77922f22682701cef5510939f586de25676ebd2"),
    "ood/ifeval_loose_test.jsonl": (40600, "4e21adf04848ecd529ae2348f57b2d8117668a13504e30aff8e32e73b87c0b44"),
    "ood/mmlu_pro.jsonl": (53924, "f0e663c22dc64a3a3a042d6282585c81a4986937e75e05b241cfbbe7c920bf30"),
    "ood/safety_benchmark.jsonl": (1373682, "0d11a77c0e003706da9b203678e8908efa8bf1ff3515dac6c5587b57ad76d539"),
    "ood/safety_benchmark_test.jsonl": (71606, "01ef4e960db9d37a274916bc74af9571ebc4afffaccda30d56c985b8b317c940"),
    "ood/supergpqa.jsonl": (383338, "b95808c712cdaeee4a5d49fccbe25d61d5682e0f3ca51650bf7f49bb96a2c772"),
    "ood/supergpqa_test.jsonl": (52482, "3ff013766f985b0d0cd2038136112f45ff34067c7f5f7c3c4d71bb68b99eb918"),
    "ood/truthful_qa_mc.jsonl": (554075, "4bd47528cb9bd65d1612cccf265101673c5566bdb44fb3083fe5337fb7f19875"),
    "ood/truthful_qa_mc_test.jsonl": (42367, "8375a2e7cf2796a0b7c028148c4cf1c8296c167893eaccd4041f5e4a9c3afc9d"),
}
# fetched only when named (`include=("gpqa",)`)
OPTIONAL: dict[str, dict[str, tuple[int, str]]] = {
    "gpqa": {
        "ood/gpqa.jsonl": (435879, "de8324a4bf8df040ff49296e1ae4a1b729eabdc719cc921861acb33405e3abef"),
        "ood/gpqa_test.jsonl": (47614, "297500b0021c87ba487af8f4a40cc2654b7e4f8354572d1e7f33fcf0b9e98898"),
    }
}
_CHUNK = 1 << 20


def sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _not_the_release_file(dest: Path, digest: str) -> str | None:
    """None when `dest` is a file whose SHA-256 is `digest`, else what is wrong with it. Every byte is hashed on
    every run: neither the size nor the modification time is trusted."""
    if dest.is_dir():
        return "an empty folder, where the release's file goes"
    try:
        have = sha256(dest)
    except OSError as err:  # unreadable: cannot be checked, so not the release's file
        return f"present but unreadable ({err.strerror or type(err).__name__}): its SHA-256 cannot be checked"
    return None if have == digest else "present with another SHA-256 than the release's"


def _source_root(source: Path) -> Path:
    """The folder holding id/ and ood/: SOURCE itself, or SOURCE/evaluation/data (a clone of the release)."""
    if not source.is_dir():
        raise FileNotFoundError(f"--from {source}: no such folder")
    release = source / "evaluation" / "data"
    return release if not (source / "id").is_dir() and release.is_dir() else source


def _copy_checked(read: Callable[[], object], dest: Path, rel: str, digest: str, where: str) -> None:
    """Stream `read()` (a binary file object) to a temporary file beside `dest`, then move it into place only if
    its SHA-256 equals `digest`; a mismatch raises ValueError and leaves nothing behind."""
    with atomic_path(dest, ".jsonl") as tmp:
        h = hashlib.sha256()
        with open(tmp, "wb") as out, read() as src:
            for block in iter(lambda: src.read(_CHUNK), b""):
                h.update(block)
                out.write(block)
        if h.hexdigest() != digest:
            raise ValueError(
                f"{rel} from {where}: SHA-256 {h.hexdigest()[:16]}... differs from the release's {digest[:16]}...; "
                "refused (a different or damaged file)"
            )


def fetch_benchmarks(
    out: str | os.PathLike,
    source: str | os.PathLike | None = None,
    include: Iterable[str] = (),
    base_url: str = RELEASE_URL,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, str]:
    """Write the release's evaluation files under `out` (same relative paths), each checked against its SHA-256.

    source: a local folder to copy from (a copy of `evaluation/data/` or a clone of the release); None downloads
    from `base_url`/PATH. include: optional sets asked for by name ("gpqa"). A file already in `out` with the
    right SHA-256 is kept (hashed again on every call: size and time are never trusted); anything else there (another
    SHA-256, an unreadable file, an empty folder) is refused unless `overwrite`, which replaces it; a folder with files
    in it is refused even then. Returns {path: sha256} of every file.
    """
    out = Path(out)
    files = dict(FILES)
    for name in include:
        if name not in OPTIONAL:
            raise ValueError(f"--include {name!r}: not one of {sorted(OPTIONAL)}")
        files.update(OPTIONAL[name])
    root = _source_root(Path(source)) if source is not None else None
    # the folders this call creates: removed again, when empty, if it fails (nothing left behind)
    new_dirs = {d for rel in files for d in (out / rel).parents if d == out or out in d.parents}
    new_dirs = sorted((d for d in new_dirs if not d.exists()), key=lambda d: len(d.parts), reverse=True)
    try:
        return _fetch(files, out, root, base_url, overwrite, log)
    except BaseException:
        for d in new_dirs:
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        raise


def _fetch(files: dict, out: Path, root: Path | None, base_url: str, overwrite: bool, log) -> dict[str, str]:
    done: dict[str, str] = {}
    for i, (rel, (size, digest)) in enumerate(sorted(files.items()), 1):
        dest = out / rel
        step = f"[{i}/{len(files)}] {rel}"
        if dest.exists():
            wrong = _not_the_release_file(dest, digest)
            if wrong is None:
                log(f"{step}: already there, checked")
                done[rel] = digest
                continue
            if dest.is_dir() and any(dest.iterdir()):  # never deleted, even with --overwrite
                raise ValueError(
                    f"{dest}: a folder with files in it, where the release's file goes; move it away (--overwrite "
                    "replaces a file or an empty folder, never a folder's files)"
                )
            if not overwrite:
                raise ValueError(f"{dest}: {wrong}; --overwrite replaces it")
            if dest.is_dir():
                dest.rmdir()  # empty: the checked file takes its place
        if root is not None:
            path = root / rel
            if not path.is_file():
                what = " (GPQA is not redistributed in plain text: fetch it from the release)" if "gpqa" in rel else ""
                raise FileNotFoundError(f"--from {root}: {rel} is missing{what}")
            _copy_checked(lambda p=path: open(p, "rb"), dest, rel, digest, str(root))
            log(f"{step}: copied, SHA-256 checked ({size:,} bytes)")
        else:
            url = f"{base_url}/{rel}"
            try:
                _copy_checked(lambda u=url: urllib.request.urlopen(u, timeout=60), dest, rel, digest, url)  # noqa: S310
            except urllib.error.URLError as e:  # offline, or the host unreachable: name what failed and the way out
                raise ValueError(
                    f"could not download {url} ({getattr(e, 'reason', e)}); without network, copy a folder that holds "
                    "the release's evaluation/data/ with --from DIR"
                ) from None
            log(f"{step}: downloaded, SHA-256 checked ({size:,} bytes)")
        done[rel] = digest
    return done
