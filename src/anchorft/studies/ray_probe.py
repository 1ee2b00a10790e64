"""Where a study's Ray tasks will run, checked before anything waits on Ray and before the run's folder is claimed.

`ray.init` has no connect timeout (it retries the cluster's GCS for a minute or more, printing warnings), and while
it blocks in Ray's C++ code no Python signal handler runs; an address Ray finds by itself (`auto`, RAY_ADDRESS, the
last `ray start` of this machine) may be stale, and a cluster with token authentication refuses a driver without its
token only after half a minute. So `probe(address)` asks first, each step bounded:

1. the address as Ray will read it: `--address HOST:PORT` as given; `auto` or none: RAY_ADDRESS when set (Ray reads
   it in that case only), else what Ray finds on this machine;
2. a TCP connection to HOST:PORT (`CONNECT_TIMEOUT` seconds), then the HTTP/2 preface a gRPC server (a Ray head's
   GCS) answers with its SETTINGS frame: a host that does not resolve, a closed port, a silent host or a server that
   is not gRPC is refused here, in at most twice `CONNECT_TIMEOUT`;
3. the cluster itself, asked by a child process (killed after `CHECK_TIMEOUT` seconds) through Ray's GCS client, with
   the same authentication settings `ray.init` would use: its live nodes, CPUs and GPUs, or the token refused.

Each refusal is a `UsageError` (one line, exit 2). A signal during the probe stops the command at once (the child is
killed with it): nothing is claimed yet. `ClusterInfo.describe()` is the line a study prints first.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass

from anchorft.errors import UsageError

__all__ = ["ClusterInfo", "probe", "reach", "split_address", "CONNECT_TIMEOUT", "CHECK_TIMEOUT"]

CONNECT_TIMEOUT = 2.0  # seconds for the TCP connection, and again for the gRPC server's first frame
CHECK_TIMEOUT = 20.0  # seconds for the child's check (importing Ray takes 1-3 s; a live head answers in < 1 s)
# HTTP/2's client connection preface and an empty SETTINGS frame: a gRPC server answers with a SETTINGS frame (type 4)
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_TOKEN_HINT = (
    "export RAY_AUTH_MODE=token and the cluster's token as RAY_AUTH_TOKEN (or its file as RAY_AUTH_TOKEN_PATH, or "
    "~/.ray/auth_token)"
)


@dataclass(frozen=True)
class ClusterInfo:
    """What `probe` found: the head's `address` (None: Ray will start an instance of its own on this machine),
    `source` (how the address was chosen: "--address", "RAY_ADDRESS", "auto", "ray start" for the last cluster
    started on this machine, "local"), the live `nodes` and their `cpus` and `gpus` (None where not asked: a Ray
    Client address)."""

    address: str | None
    source: str
    nodes: int | None = None
    cpus: float | None = None
    gpus: float | None = None

    @property
    def local(self) -> bool:
        return self.address is None

    def describe(self) -> str:
        """One line: where the cells run, how that was chosen, and the cluster's size."""
        size = (
            f"{_count(self.nodes, 'node')}, {_count(self.cpus, 'CPU')}, {_count(self.gpus, 'GPU')}"
            if self.nodes is not None
            else "size not asked (a Ray Client address)"
        )
        if self.local:
            return (
                f"ray: no --address and no RAY_ADDRESS: a Ray instance of its own on this machine for this study, "
                f"stopped after it ({_count(self.cpus, 'CPU')}, {_count(self.gpus, 'GPU')})"
            )
        how = {
            "--address": "--address",
            "RAY_ADDRESS": "chosen by RAY_ADDRESS",
            "auto": "found by --address auto",
            "ray start": "no --address: the cluster this machine last started with `ray start`",
        }[self.source]
        return f"ray: cluster at {self.address} ({how}): {size}"


def _count(x: float | None, what: str) -> str:
    if x is None:
        return f"? {what}s"
    return f"{int(x) if float(x).is_integer() else f'{x:g}'} {what}{'s' * (x != 1)}"


def split_address(address: str, what: str = "--address") -> tuple[str, int]:
    """HOST and PORT of a Ray address ("HOST:PORT", "[IPv6]:PORT", "ray://HOST:PORT"), else a UsageError."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(
            f"{what} {address!r}: expected HOST:PORT (the head's port, 6379 unless `ray start --port` chose another) "
            "or auto"
        )
    return host, int(port)


def reach(address: str, what: str = "--address", timeout: float = CONNECT_TIMEOUT) -> None:
    """A TCP connection to the address and a gRPC server's first frame there, each within `timeout` seconds; a
    UsageError in one line naming `what` and the address otherwise."""
    host, port = split_address(address, what)
    where = f"{what} {address}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UsageError(f"{where}: cannot resolve the host {host!r} ({e.strerror})") from None
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.settimeout(timeout)
        try:
            s.connect(sockaddr)
        except ConnectionRefusedError:
            raise UsageError(
                f"{where}: nothing listens there (connection refused): is the cluster running? (`ray status "
                f"--address {address}` on the head)"
            ) from None
        except TimeoutError:
            raise UsageError(f"{where}: no answer within {timeout:g} s (the host is down, or a firewall)") from None
        except OSError as e:
            raise UsageError(f"{where}: cannot connect ({e.strerror or e})") from None
        try:
            s.sendall(_PREFACE)
            head = b""
            while len(head) < 9:
                chunk = s.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
        except (TimeoutError, OSError):
            head = b""
    if len(head) < 9 or head[3] != 4:
        raise UsageError(
            f"{where}: something listens there but is not a Ray cluster's head (no gRPC answer within {timeout:g} "
            "s): give the head's port (6379 unless `ray start --port` chose another)"
        )


def probe(address: str | None, timeout: float = CHECK_TIMEOUT) -> ClusterInfo:
    """Check the cluster `address` names (None: none given; "auto") as `ray.init(address)` would find it, within
    bounded times (module docstring); return what was found, or raise a UsageError in one line."""
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if address not in (None, "auto"):  # Ray reads RAY_ADDRESS only for None and "auto"
        target, source, what = address, "--address", "--address"
    elif env:
        target, source, what = env, "RAY_ADDRESS", "RAY_ADDRESS"
    else:
        target, source, what = None, address or "local", "--address auto" if address else "Ray"
    if target is not None:
        reach(target, what)
        if target.startswith("ray://"):  # Ray Client: its server is not the GCS, which it does not expose
            return ClusterInfo(target, source)
    code = "import sys; from anchorft.studies.ray_probe import _check; _check(sys.argv[1])"
    arg = "" if address is None else address  # "": none given
    try:
        res = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:  # subprocess.run killed it
        raise UsageError(f"{what} {target or ''}: the Ray cluster did not answer within {timeout:g} s") from None
    lines = res.stdout.strip().splitlines()
    try:
        got = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        last = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
        raise UsageError(f"{what} {target or ''}: checking the Ray cluster failed: {last}") from None
    error = got.get("error")
    found = got.get("address")
    where = f"{what} {target}" if target is not None else f"{what} (found {found})" if found else what
    if error == "none":
        raise UsageError(
            "--address auto: no Ray cluster found on this machine (none started with `ray start`, RAY_ADDRESS "
            "unset): start one, or give the head's HOST:PORT"
        )
    if error == "auth":
        raise UsageError(
            f"{where}: the cluster requires token authentication and refused this machine's token (RAY_AUTH_MODE is "
            f"{got.get('mode') or 'unset'} here): {_TOKEN_HINT}"
        )
    if error is not None:
        raise UsageError(f"{where}: the Ray cluster did not answer ({error})")
    if found is None:
        return ClusterInfo(None, "local", cpus=got.get("cpus"), gpus=got.get("gpus"))
    if target is None:
        source = "auto" if address == "auto" else "ray start"
    return ClusterInfo(target or found, source, got["nodes"], got["cpus"], got["gpus"])


def _check(address: str) -> None:
    """The child's part of `probe` (imports Ray): one JSON line on stdout, {"address", "nodes", "cpus", "gpus"}, or
    {"error": "none" | "auth" | why}; {"address": None, "cpus", "gpus"} where Ray would start an instance of its own.
    Resolves and authenticates as `ray.init(address)` does."""
    addr = address or None

    def say(**kw) -> None:
        print(json.dumps(kw), flush=True)

    from ray._private.services import canonicalize_bootstrap_address

    try:
        gcs = canonicalize_bootstrap_address(addr)
    except ConnectionError:
        return say(error="none")
    if gcs is None:  # ray.init would start an instance here
        from ray._private.utils import get_num_cpus

        try:
            from ray._private.accelerators import get_accelerator_manager_for_resource

            gpus = get_accelerator_manager_for_resource("GPU").get_current_node_num_accelerators()
        except Exception:  # noqa: BLE001 - the count is informative only
            gpus = None
        return say(address=None, cpus=get_num_cpus(), gpus=gpus)
    if addr in (None, "auto") and not os.environ.get("RAY_ADDRESS"):  # found on this machine: not reached yet
        try:
            reach(gcs, "--address auto" if addr else "Ray's last `ray start` cluster")
        except UsageError as e:
            return say(address=gcs, error=str(e).split(": ", 1)[-1])
    if addr in (None, "auto"):  # as ray.init: a cluster found by itself may turn token authentication on
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )

        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    from ray._raylet import InnerGcsClient

    try:
        client = InnerGcsClient.standalone(gcs, None, 5000)
        nodes = client.get_all_node_info(timeout=5)
    except Exception as e:  # noqa: BLE001 - reported in one line by the parent
        if "InvalidAuthToken" in str(e) or type(e).__name__ == "AuthenticationError":
            return say(address=gcs, error="auth", mode=os.environ.get("RAY_AUTH_MODE"))
        return say(address=gcs, error=(str(e).strip().splitlines() or [type(e).__name__])[0])
    alive = [n for n in nodes.values() if n.state == 0]  # GcsNodeInfo.ALIVE
    total = lambda key: sum(float(dict(n.resources_total).get(key, 0)) for n in alive)  # noqa: E731
    say(address=gcs, nodes=len(alive), cpus=total("CPU"), gpus=total("GPU"))
