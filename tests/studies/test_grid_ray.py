"""The grid runner's Ray executor on a real cluster: a head and a worker node started here as separate processes
on this machine (`ray start --block`, each with its own temp folder and one CPU, no dashboard), stopped by their
own process ids, never by `ray stop` (which stops every Ray process on the machine). Slow-marked: `make test-ray`.

A W2S sweep, a smoke comparison, its WiSE-FT interpolation and an evaluation suite give on the cluster what they give
in this machine's processes; a cell whose worker node is killed mid-study is lost (no retries): the other cells run,
the study ends in one line naming it, and the study resumed loses nothing and repeats no finished cell; with retries,
the lost cells run again on the node left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray")

RAY = str(Path(sys.executable).with_name("ray"))


def _pids_with(tag: str, root: int) -> list[int]:
    """A node's processes: `root` (its `ray start`), those whose command line names `tag` (the node's own temp
    folder), and all their descendants (the task workers, whose command line Ray rewrites to "ray::...")."""
    parent, ours = {}, {root}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            parent[int(pid)] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if tag in cmd:
            ours.add(int(pid))
    grew = True
    while grew:
        new = {pid for pid, pp in parent.items() if pp in ours} - ours
        ours |= new
        grew = bool(new)
    return sorted(ours - {os.getpid()})


class Node:
    """One Ray node as a process group of its own, in its own temp folder (short: Ray's socket paths are limited)."""

    def __init__(self, head_port: int, head: bool):
        self.tmp = tempfile.mkdtemp(prefix="afr", dir="/tmp")
        args = ["--head", f"--port={head_port}", "--include-dashboard=false"] if head else [
            f"--address=127.0.0.1:{head_port}"
        ]  # fmt: skip
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [RAY, "start", "--block", "--num-cpus=1", f"--temp-dir={self.tmp}", "--node-ip-address=127.0.0.1", *args],
            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.tmp,
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL this node's processes (its group and every process naming its temp folder); its folder stays (the
        driver reads a lost worker's log there) until `remove`."""
        for pid in _pids_with(self.tmp, self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(30)

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Cluster:
    """A head and one worker node on 127.0.0.1, one CPU each, joined before use."""

    def __init__(self):
        with socket.socket() as s:  # a free port now; `ray start` fails at once if another process took it since
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.address, self.port = f"127.0.0.1:{port}", port
        self.head = Node(port, head=True)
        self.worker = Node(port, head=False)
        self.wait_for(nodes=2)

    def new_worker(self) -> None:
        """Replace a killed worker node by a new one."""
        self.worker.remove()
        self.worker = Node(self.port, head=False)
        self.wait_for(nodes=2)

    def wait_for(self, nodes: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sum(n["Alive"] for n in _nodes(self.address)) >= nodes:
                return
            time.sleep(1)
        raise TimeoutError(f"Ray cluster at {self.address}: fewer than {nodes} nodes alive after {timeout} s")

    def stop(self) -> None:
        self.worker.remove()
        self.head.remove()


def _nodes(address: str) -> list[dict]:
    """The cluster's nodes, asked in a child process (this test process stays out of Ray: the commands under test
    start and stop their own connection). The list is printed behind a marker: Ray prints its own lines on stdout
    too, before and after it (a node marked dead: "... (2) raylet has lagging heartbeats ..."). None found: []."""
    code = (f"import json, ray; ray.init(address={address!r}, log_to_driver=False); "
            f"print({_NODES_MARK!r} + json.dumps(ray.nodes()), flush=True)")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return _parse_nodes(res.stdout) if res.returncode == 0 else []


_NODES_MARK = "anchorft-test-nodes: "


def _parse_nodes(stdout: str) -> list[dict]:
    found = [line for line in stdout.splitlines() if line.startswith(_NODES_MARK)]
    return json.loads(found[-1][len(_NODES_MARK) :]) if found else []


def test_the_node_list_is_found_among_rays_own_lines():
    """CI once failed here: a node marked dead made Ray print lines after the list, and the last line was read."""
    nodes = [{"NodeID": "a", "Alive": True}, {"NodeID": "b", "Alive": False}]
    ray_lines = "The node with node id b has been marked dead because...\n\t(2) raylet has lagging heartbeats due to\n"
    stdout = "2026 INFO worker.py: Connecting\n" + _NODES_MARK + json.dumps(nodes) + "\n" + ray_lines
    assert _parse_nodes(stdout) == nodes
    assert _parse_nodes(ray_lines) == []


@pytest.fixture(scope="module", autouse=True)
def _nodes_stopped_at_a_sigterm():
    """`make test-ray`'s timeout stops a hung run with SIGTERM, which by default ends pytest at once: the nodes, each
    a session of its own, would outlive it (taking the CPU of whatever runs next). As an interrupt, pytest tears the
    fixtures and the `finally` blocks down, which stop the nodes."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="module")
def cluster():  # one cluster for the module (about 6 s to start); a test that kills its worker starts a new one
    c = Cluster()
    try:
        yield c
    finally:
        c.stop()


def _sweep_spec(tmp_path: Path, steps: int = 60, short: int | None = None) -> Path:
    """A 6-cell overlap sweep: three cells of `short` steps (steps // 2 unless given), three of `steps`."""
    spec = {
        "config": {"d": 32, "s": 8, "group_sizes": [4, 6], "weak_neurons": 4, "batch_size": 8, "steps": steps,
                   "n_seeds": 2, "n_log": 4, "chunk": 8, "modes": ["sft", "w2s"], "loss": "correlation"},
        "grid": {"rows": [{"s": 4, "steps": steps // 2 if short is None else short}, {"s": 8, "steps": steps}],
                 "rho_sqrt_s": [0.0, 1.0, 1.5]},
        "phase": {"turn": 0.05, "drop": 0.05},
    }  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _sweep_json(folder: Path) -> dict:
    """sweep.json without its provenance and the points' `cached` flags (whether this run measured them)."""
    data = json.loads((folder / "sweep.json").read_text())
    data.pop("provenance")
    data["points"] = [{k: v for k, v in pt.items() if k != "cached"} for pt in data["points"]]
    return data


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "anchorft", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def _record(folder: Path) -> list[str]:
    """The names of the cells recorded as finished in the study's folder, in order (a lost cell's line aside)."""
    path = folder / "cells.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []
    return [x["name"] for x in lines if "result" in x]


def _timed(argv: list[str], cwd: Path, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "anchorft", *argv], cwd=cwd, capture_output=True, text=True,
                         timeout=120, env=env)  # fmt: skip
    return res, time.monotonic() - t0


def _ray_found_here() -> bool:
    """Whether Ray would find a cluster on this machine by itself (a GCS process running, a `ray start` address file,
    RAY_ADDRESS): the tests of no address and of `auto` need none."""
    gcs = any(b"gcs_server" in _cmdline(p) for p in filter(str.isdigit, os.listdir("/proc")))
    current = Path(os.environ.get("RAY_TMPDIR", "/tmp"), "ray", "ray_current_cluster")  # where `ray start` notes it
    return gcs or current.exists() or bool(os.environ.get("RAY_ADDRESS"))


SWEEP = ["w2s", "sweep", "--kind", "overlap", "--quiet"]


def test_no_address_starts_a_local_instance_that_leaves_no_token_and_auto_without_a_cluster_is_refused(tmp_path):
    """Before the module's cluster starts. No --address: a Ray instance of its own, named in the first line, and no
    ~/.ray/auth_token written (Ray writes one for a local instance, and every later `ray start` of the user would
    turn token authentication on); --address auto with no cluster: one line, exit 2, no folder."""
    if _ray_found_here():
        pytest.skip("a Ray cluster is discoverable on this machine")
    env = dict(os.environ, HOME=str(tmp_path / "home"), RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    res, took = _timed([*SWEEP, "--spec", str(_sweep_spec(tmp_path, steps=20)), "--out", "auto", "--executor", "ray",
                        "--address", "auto"], tmp_path, env)  # fmt: skip
    assert res.returncode == 2 and took < 10, (took, res.stderr[-2000:])
    assert res.stderr.strip().splitlines() == [
        "anchorft w2s sweep: error: --address auto: no Ray cluster found on this machine (none started with `ray "
        "start`, RAY_ADDRESS unset): start one, or give the head's HOST:PORT"
    ]
    assert not (tmp_path / "auto").exists()
    res, took = _timed([*SWEEP, "--spec", str(_sweep_spec(tmp_path, steps=20)), "--out", "local", "--executor", "ray"],
                       tmp_path, env)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    first = res.stderr.strip().splitlines()[0]
    assert first.startswith("ray: no --address and no RAY_ADDRESS: a Ray instance of its own on this machine"), first
    assert not (tmp_path / "home" / ".ray" / "auth_token").exists()
    print(f"a sweep on a local instance in {took:.1f} s")


def test_a_signal_during_the_probe_exits_143_at_once_and_leaves_nothing(tmp_path, children):
    """A server that answers as gRPC and then says nothing keeps the probe's child waiting for Ray's client: a SIGTERM
    then exits 143 within seconds, the child killed with it, no folder made."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    conns = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conns.append(conn)
            conn.sendall(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # an HTTP/2 SETTINGS frame, then silence

    threading.Thread(target=serve, daemon=True).start()
    address = f"127.0.0.1:{server.getsockname()[1]}"
    try:
        argv = [sys.executable, "-m", "anchorft", *SWEEP, "--quick", "--out", "study", "--executor", "ray"]
        proc = children.start([*argv, "--address", address], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        err = children.read_stderr(proc)
        probing = lambda: [p for p in _descendants(proc.pid) if b"ray_probe import _check" in _cmdline(p)]  # noqa: E731
        children.wait_until(proc, lambda: bool(probing()), 60, lambda: "".join(err))
        child = probing()[0]
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        took = time.monotonic() - t0
    finally:
        server.close()
        for c in conns:
            c.close()
    assert rc == 143 and took < 5, (rc, took, "".join(err)[-2000:])
    assert "terminated" in "".join(err).strip().splitlines()[-1]
    assert not (tmp_path / "study").exists()
    assert b"ray_probe import _check" not in _cmdline(child)  # the probe's child went with the command


def _cmdline(pid: str | int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _descendants(root: int) -> list[int]:
    parent = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent[int(pid)] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    ours, grew = {root}, True
    while grew:
        new = {p for p, pp in parent.items() if pp in ours} - ours
        ours |= new
        grew = bool(new)
    return sorted(ours - {root})


def test_a_cluster_with_token_authentication_and_a_stopped_one_are_one_line(tmp_path):
    """A head with token authentication: a driver without its token is refused in one line (Ray: a 77-line
    InvalidAuthToken traceback after 27 s), with it the probe names the cluster; once stopped, its address is
    refused as nothing listening. RAY_ADDRESS chooses the cluster when no --address is given, and the line says so."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "anchorft-test-token"}
    os.environ.update(token)  # the head's environment (Node copies it), taken back at once
    try:
        head = Node(port, head=True)
    finally:
        for k in token:
            os.environ.pop(k)
    address = f"127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(tmp_path / "home"))
    argv = [*SWEEP, "--quick", "--out", "study", "--executor", "ray", "--address", address]
    try:
        deadline = time.monotonic() + 60
        while True:  # the head is up once its port answers as gRPC
            try:
                from anchorft.studies.ray_probe import reach

                reach(address)
                break
            except ValueError:
                assert time.monotonic() < deadline, "the token-authenticated head did not start"
                time.sleep(0.5)
        time.sleep(1)
        res, took = _timed(argv, tmp_path, env)
        assert res.returncode == 2 and took < 10, (took, res.stderr[-2000:])
        assert res.stderr.strip().splitlines() == [
            f"anchorft w2s sweep: error: --address {address}: the cluster requires token authentication and refused "
            "this machine's token (RAY_AUTH_MODE is unset here): export RAY_AUTH_MODE=token and the cluster's token "
            "as RAY_AUTH_TOKEN (or its file as RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token)"
        ]
        assert not (tmp_path / "study").exists()
        code = "from anchorft.studies.ray_probe import probe; print(probe(None).describe())"
        want = f"ray: cluster at {address} (chosen by RAY_ADDRESS): 1 node, 1 CPU, 0 GPUs"
        deadline = time.monotonic() + 60
        while True:  # the head's GCS answers before its own node has registered (0 nodes at first)
            ok = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                                env=dict(env, RAY_ADDRESS=address, **token))  # fmt: skip
            if ok.stdout.strip() == want or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert ok.stdout.strip() == want, ok
    finally:
        head.remove()
    res, took = _timed(argv, tmp_path, env)
    assert res.returncode == 2 and took < 10, (took, res.stderr[-2000:])
    assert res.stderr.strip().splitlines()[0].endswith(f"--address {address}: nothing listens there (connection "
                                                        f"refused): is the cluster running? (`ray status --address "
                                                        f"{address}` on the head)")  # fmt: skip
    assert not (tmp_path / "study").exists()


def test_a_sweep_and_a_comparison_on_the_cluster_equal_local_processes(cluster, tmp_path):
    spec = str(_sweep_spec(tmp_path))
    local = _cli("w2s", "sweep", "--kind", "overlap", "--spec", spec, "--out", "local", "--quiet", cwd=tmp_path)
    assert local.returncode == 0, local.stderr[-2000:]
    t0 = time.perf_counter()
    on_ray = _cli("w2s", "sweep", "--kind", "overlap", "--spec", spec, "--out", "ray", "--quiet",
                  "--executor", "ray", "--address", cluster.address, cwd=tmp_path)  # fmt: skip
    assert on_ray.returncode == 0, on_ray.stderr[-2000:]
    print(f"sweep: 6 cells on the cluster in {time.perf_counter() - t0:.1f} s")
    first = on_ray.stderr.strip().splitlines()[0]  # where the cells run, before anything else
    assert first == f"ray: cluster at {cluster.address} (--address): 2 nodes, 2 CPUs, 0 GPUs", on_ray.stderr[-2000:]
    assert _sweep_json(tmp_path / "local") == _sweep_json(tmp_path / "ray")  # relative --out: the driver's folder
    assert sorted(_record(tmp_path / "ray")) == sorted(_record(tmp_path / "local"))

    env = dict(os.environ, ANCHORFT_CACHE=str(tmp_path / "cache"))
    runs = {}
    for name, extra in (("local", ["--workers", "2"]), ("ray", ["--executor", "ray", "--address", cluster.address])):
        res = subprocess.run(
            [sys.executable, "-m", "anchorft", "toy", "compare", "--preset", "smoke", "--methods", "sft", "rpsft-k2",
             "--out", f"cmp-{name}", *extra],
            cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        results = json.loads((tmp_path / f"cmp-{name}" / "results.json").read_text())
        for entry in results["methods"].values():  # every number but the wall times
            for seed in [entry, *entry["per_seed"]]:
                seed.pop("train_seconds", None)
        results.pop("provenance", None)
        runs[name] = results
    assert runs["local"] == runs["ray"]
    # the cells wrote their models in the study's folder (relative to where the command ran), as local ones do
    assert sorted(os.listdir(tmp_path / "cmp-ray" / "models")) == sorted(os.listdir(tmp_path / "cmp-local" / "models"))

    # WiSE-FT from the comparison's saved models, on the cluster and here
    itp = {}
    for name, extra in (("local", []), ("ray", ["--executor", "ray", "--address", cluster.address])):
        res = _cli("toy", "interpolate", "--compare", "cmp-local", "--runs", "sft", "--alphas", "0.5", "--out",
                   f"itp-{name}", *extra, cwd=tmp_path)  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        itp[name] = json.loads((tmp_path / f"itp-{name}" / "results.json").read_text())
        itp[name].pop("provenance", None)
    assert itp["local"] == itp["ray"]


def _suite_inputs(root: Path) -> tuple[Path, Path]:
    """A tiny untrained testbed model (the project's tokenizer and Llama builder) and a benchmark folder."""
    import numpy as np
    import torch

    from anchorft.toy.pretrain import PretrainConfig, build_model, build_tokenizer

    torch.set_num_threads(1)
    tok = build_tokenizer(np.random.default_rng(0))
    cfg = PretrainConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    model_dir = root / "model"
    build_model(cfg, len(tok), tok, seed=0).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    benches = root / "benches"
    system = {"role": "system", "content": "Put your final answer within \\boxed{}."}
    for folder, name, items in (("id", "adds", [(f"what is {a} + {a}?", str(2 * a)) for a in range(1, 5)]),
                                ("ood", "pick_test", [("Which is a fruit? A. apple B. stone", "A")])):  # fmt: skip
        (benches / folder).mkdir(parents=True, exist_ok=True)
        rows = [
            {"prompt": [system, {"role": "user", "content": q}], "reward_model": {"ground_truth": a}} for q, a in items
        ]
        (benches / folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model_dir, benches


def test_an_evaluation_suite_on_the_cluster_equals_the_local_one(cluster, tmp_path):
    model, benches = _suite_inputs(tmp_path)
    argv = ["eval", "suite", "--models", f"base={model}", f"tuned={model}", "--bench-dir", str(benches), "--benches",
            "adds,pick_test", "--n", "3", "--max-new-tokens", "6", "--backend", "hf", "--no-calibrate"]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")  # the local run on the cells' one thread
    local = subprocess.run([sys.executable, "-m", "anchorft", *argv, "--out", "local"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert local.returncode == 0, local.stderr[-2000:]
    t0 = time.perf_counter()
    on_ray = _cli(*argv, "--out", "ray", "--executor", "ray", "--address", cluster.address, "--cell-cpus", "1",
                  cwd=tmp_path)  # fmt: skip
    assert on_ray.returncode == 0, on_ray.stderr[-2000:]
    print(f"eval suite: 2 models on the cluster in {time.perf_counter() - t0:.1f} s")
    tables = {}
    for name in ("local", "ray"):
        tables[name] = json.loads((tmp_path / name / "table.json").read_text())
        tables[name].pop("provenance")
        for model_name in ("base", "tuned"):  # the samples themselves, not only their grades
            for bench in ("adds", "pick_test"):
                gens = (tmp_path / name / model_name / bench / "generations.jsonl").read_text()
                tables[name][f"{model_name}/{bench}"] = [json.loads(g)["responses"] for g in gens.splitlines()]
    assert tables["local"] == tables["ray"]
    assert sorted(_record(tmp_path / "ray")) == ["base", "tuned"]
    # the models loaded in the cluster's task workers (their logs are the nodes' files), not in the command
    logs = "".join(f.read_text(errors="replace") for n in (cluster.head, cluster.worker)
                   for f in Path(n.tmp).glob("session_*/logs/worker-*.err"))  # fmt: skip
    assert "base: loading" in logs and "tuned: loading" in logs and "loading" not in on_ray.stderr


def _running_on(node: Node) -> bool:
    """Whether a cell runs on `node` now: one of its processes is a Ray task executing (Ray titles a worker process
    "ray::FUNCTION" while it runs a task, "ray::IDLE" otherwise)."""
    for pid in _pids_with(node.tmp, node.proc.pid):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::_run_in"):
                return True
        except OSError:
            continue
    return False


def _study_losing_its_worker(cluster: Cluster, folder: Path, argv: list[str], retries: int):
    """Start the study on the cluster, kill its worker node while it runs a cell, and wait for the study: (exit
    code, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "anchorft", *argv, "--executor", "ray", "--address",
                             cluster.address, "--retries", str(retries)], cwd=folder, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while not _running_on(cluster.worker) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    cluster.worker.kill()  # a worker node lost with a cell running on it
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def test_a_worker_node_killed_mid_study_then_resumed_loses_and_repeats_nothing(cluster, tmp_path):
    spec = str(_sweep_spec(tmp_path, steps=400))
    argv = ["w2s", "sweep", "--kind", "overlap", "--spec", spec, "--out", "study", "--quiet"]
    if sum(n["Alive"] for n in _nodes(cluster.address)) < 2:  # an earlier test left the cluster short
        cluster.new_worker()
    rc, err = _study_losing_its_worker(cluster, tmp_path, argv, retries=0)
    record = [json.loads(x) for x in (tmp_path / "study" / "cells.jsonl").read_text().splitlines()]
    finished = [r["name"] for r in record if "result" in r]
    lost = [r["name"] for r in record if "failed" in r]
    # the lost cells are recorded as failed, every other cell ran, and the study ended in one line naming them
    assert rc == 1 and lost and len(set(finished + lost)) == len(finished + lost) == 6, (rc, record)
    lines = err.strip().splitlines()  # the line naming the cluster, then the one naming the lost cells
    assert len(lines) == 2 and lines[0].startswith("ray: cluster at ") and "lost after 0 retries" in lines[1], err
    assert f"cell {lost[0]}" in err, err[-2000:]

    resumed = _cli(*argv, cwd=tmp_path)  # the same study, resumed on this machine's processes: only the lost run
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    names = _record(tmp_path / "study")  # nothing lost or repeated
    assert names[: len(finished)] == finished and sorted(names[len(finished) :]) == sorted(lost) and len(names) == 6
    whole = _cli(*argv[:-3], "--out", "whole", "--quiet", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert _sweep_json(tmp_path / "study") == _sweep_json(tmp_path / "whole")

    # with retries, the lost cells run again on the node left, and the study finishes as if nothing happened
    cluster.new_worker()
    argv = ["w2s", "sweep", "--kind", "overlap", "--spec", spec, "--out", "retried", "--quiet"]
    rc, err = _study_losing_its_worker(cluster, tmp_path, argv, retries=2)
    assert rc == 0, err[-2000:]
    names = _record(tmp_path / "retried")
    assert len(names) == len(set(names)) == 6 and _sweep_json(tmp_path / "retried") == _sweep_json(tmp_path / "whole")


def test_sigterm_to_a_study_on_the_cluster_exits_143_and_keeps_its_finished_cells(cluster, tmp_path, children):
    """`ray.init` installs Ray's own SIGTERM handler (exit 15, the run marked failed): anchorft's is put back after
    it. A SIGTERM once a cell finished and others run: the running tasks see the study's stop flag and stop at their
    next safe point (no Ray cancel, which can race a task's reply and crash the driver), the queued ones at their
    start; the study exits 143 within seconds, marked interrupted, the finished cells recorded; the resumed study
    repeats none of them."""
    if sum(n["Alive"] for n in _nodes(cluster.address)) < 2:
        cluster.new_worker()
    # three short cells, point0-2, and three of about 5 s a CPU, point3-5: the signal once the short ones are
    # recorded, when long ones run (each seeing the flag within a second); the resumed study runs the long ones only
    spec = str(_sweep_spec(tmp_path, steps=30000, short=300))
    short, long = {"point0", "point1", "point2"}, {"point3", "point4", "point5"}
    argv = ["w2s", "sweep", "--kind", "overlap", "--spec", spec, "--out", "study", "--quiet"]
    proc = children.start([sys.executable, "-m", "anchorft", *argv, "--executor", "ray", "--address",
                           cluster.address], cwd=tmp_path, stderr=subprocess.PIPE, text=True)  # fmt: skip
    err = children.read_stderr(proc)
    children.wait_until(proc, lambda: short <= set(_record(tmp_path / "study")), 300, lambda: "".join(err))
    before = set(_record(tmp_path / "study"))
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=60)
    took = time.monotonic() - t0
    text = "".join(err)
    assert rc == 143, text[-2000:]
    assert took < 10, took
    assert "terminated" in text.strip().splitlines()[-1] and "Traceback" not in text, text[-2000:]
    assert json.loads((tmp_path / "study" / "anchorft-run.json").read_text())["status"] == "interrupted"
    finished = _record(tmp_path / "study")
    # no long cell finished after the signal: the running ones stopped at a step (one that ran to its end, about 5 s,
    # would be recorded: the stop did not reach it), the queued one did not start
    assert 3 <= len(finished) < 6 and not (set(finished) - before) & long, (before, finished)
    resumed = _cli(*argv, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    names = _record(tmp_path / "study")
    assert names[: len(finished)] == finished and len(names) == len(set(names)) == 6
