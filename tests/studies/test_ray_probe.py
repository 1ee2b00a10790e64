"""The Ray address probe (`anchorft.studies.ray_probe`) on addresses where no cluster answers, without Ray: a closed
port, a host that does not resolve, a socket that listens but is silent or speaks no gRPC; each study command refuses
them in one line with exit 2 within seconds, no folder made; --workers with --executor ray is refused; a SIGTERM
inside `ray.init` (Ray's handler exits 15) stops the study as a SIGTERM (exit 143). Against a real cluster (success,
token authentication, RAY_ADDRESS, a local instance, a signal mid-probe): tests/studies/test_grid_ray.py."""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
import types
from importlib.machinery import ModuleSpec

import pytest

from anchorft import stop
from anchorft.cli import main
from anchorft.errors import UsageError
from anchorft.studies.grid import Cell, RayCluster, RayTasks
from anchorft.studies.ray_probe import ClusterInfo, probe, reach, split_address

STUDIES = {  # each study command, with what it needs besides the executor flags
    "toy compare": ["toy", "compare", "--preset", "smoke"],
    "toy interpolate": ["toy", "interpolate", "--compare", "nowhere", "--runs", "sft"],
    "toy rl": ["toy", "rl", "--compare", "nowhere"],
    "w2s sweep": ["w2s", "sweep", "--kind", "overlap", "--quick"],
    "eval suite": ["eval", "suite", "--models", "base=nowhere"],
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Listener:
    """A socket on 127.0.0.1 that accepts and then says `reply` (nothing: silent) and keeps the connection."""

    def __init__(self, reply: bytes = b""):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.reply, self.conns = reply, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.reply:
                conn.sendall(self.reply)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def silent():
    lis = _Listener()
    yield lis
    lis.close()


def test_a_closed_port_is_refused_at_once():
    t0 = time.monotonic()
    with pytest.raises(UsageError, match=r"--address 127\.0\.0\.1:\d+: nothing listens there \(connection refused\)"):
        reach(f"127.0.0.1:{_closed_port()}")
    assert time.monotonic() - t0 < 1


def test_a_host_that_does_not_resolve_is_named():
    with pytest.raises(UsageError, match=r"--address nohost\.invalid:6379: cannot resolve the host 'nohost\.invalid'"):
        reach("nohost.invalid:6379")


def test_a_silent_listener_and_a_server_without_grpc_are_no_ray_head(silent):
    t0 = time.monotonic()
    with pytest.raises(UsageError, match="something listens there but is not a Ray cluster's head"):
        reach(silent.address, timeout=0.3)
    assert time.monotonic() - t0 < 1.5
    http = _Listener(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    try:
        with pytest.raises(UsageError, match="not a Ray cluster's head"):
            reach(http.address, timeout=0.5)
    finally:
        http.close()


def test_a_grpc_server_passes_the_connection_check():
    # an HTTP/2 SETTINGS frame (9-byte header, type 4) is what a gRPC server (a Ray head's GCS) answers first
    grpc = _Listener(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
    try:
        reach(grpc.address, timeout=0.5)
    finally:
        grpc.close()


@pytest.mark.parametrize("bad", ["6379", "head", "head:", "head:port", ":6379", "head:0", "head:70000"])
def test_an_address_that_is_no_host_and_port_is_refused(bad):
    with pytest.raises(UsageError, match="expected HOST:PORT"):
        split_address(bad)
    assert split_address("[::1]:6379") == ("::1", 6379) and split_address("ray://h:10001") == ("h", 10001)


def test_the_address_is_read_as_ray_reads_it(monkeypatch):
    closed = f"127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("RAY_ADDRESS", closed)
    with pytest.raises(UsageError, match=f"^RAY_ADDRESS {closed}: nothing listens"):
        probe(None)  # no --address: RAY_ADDRESS, as ray.init reads it
    with pytest.raises(UsageError, match=f"^RAY_ADDRESS {closed}: nothing listens"):
        probe("auto")
    with pytest.raises(UsageError, match="^--address nohost.invalid:1: cannot resolve"):
        probe("nohost.invalid:1")  # an explicit address: Ray ignores RAY_ADDRESS


def test_the_first_line_names_the_cluster_and_how_it_was_chosen():
    assert ClusterInfo("h:6379", "--address", 2, 3.0, 1.0).describe() == (
        "ray: cluster at h:6379 (--address): 2 nodes, 3 CPUs, 1 GPU"
    )
    assert (
        "(chosen by RAY_ADDRESS): 1 node, 0.5 CPUs, 0 GPUs" in ClusterInfo("h:1", "RAY_ADDRESS", 1, 0.5, 0).describe()
    )
    local = ClusterInfo(None, "local", cpus=8, gpus=0).describe()
    assert "a Ray instance of its own on this machine" in local and "8 CPUs, 0 GPUs" in local


@pytest.mark.parametrize("command", sorted(STUDIES))
def test_every_study_refuses_an_unreachable_cluster_in_one_line_and_makes_no_folder(command, tmp_path, capsys):
    pytest.importorskip("ray")
    out = tmp_path / "out"
    address = f"127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    assert main([*STUDIES[command], "--out", str(out), "--executor", "ray", "--address", address]) == 2
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"anchorft {command}: error: --address {address}: nothing listens there (connection refused): is the "
        f"cluster running? (`ray status --address {address}` on the head)"
    ], err
    assert not out.exists() and took < 10


@pytest.mark.parametrize(
    "argv",
    [
        ["toy", "compare", "--preset", "smoke"],
        ["toy", "interpolate", "--compare", "nowhere", "--runs", "sft"],
        ["w2s", "sweep", "--kind", "overlap"],
    ],
)
def test_workers_with_the_ray_executor_is_refused(argv, tmp_path, capsys):
    pytest.importorskip("ray")
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out), "--executor", "ray", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0].endswith(
        "error: --workers: not with --executor ray (the cluster's free CPUs decide how many cells run at once)"
    ), err
    assert not out.exists()


def test_a_sigterm_inside_ray_init_stops_the_study_as_a_sigterm(monkeypatch):
    """Ray's SIGTERM handler, installed inside ray.init, exits with status 15: the study raises `Terminated` instead
    (exit 143, the run marked interrupted), and anchorft's handler is back."""

    def init(**kw):
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(signal.SIGTERM))  # as ray.init does
        raise SystemExit(signal.SIGTERM)

    # a stand-in for Ray's module (the executor checks that Ray can be imported): runs without Ray installed
    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init, __spec__=ModuleSpec("ray", None))
    monkeypatch.setitem(sys.modules, "ray", fake)
    tasks = RayTasks(RayCluster("127.0.0.1:1"))
    restore = stop.install()
    try:
        with pytest.raises(stop.Terminated):
            next(tasks.map(dict, [Cell("a")]))
        assert stop.requested() == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is stop._handler
    finally:
        restore()
        stop.clear()
