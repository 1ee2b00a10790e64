"""Stand-ins for SLURM's `srun`, `scancel` and `scontrol` on one machine, for tests/test_slurm.py's
simulated allocation: each keeps the behaviour the templates rely on.

    srun [OPTIONS] CMD...        CMD once per node (SLURM_NNODES), at once, with that node's SLURM_NODEID /
                                 SLURM_PROCID; a TERM to srun itself kills every task's processes (SIGKILL), as
                                 srun does ("forcing job termination")
    scancel --signal=SIG JOBID   SIG to every process of the running step (each task and its descendants, as
                                 slurmstepd signals the step's cgroup); not to the batch shell
    scontrol show hostnames L    $SIM_HOSTS, one a line;  scontrol requeue JOBID: recorded
Each call is appended to $SIM_DIR/calls.log; srun writes its tasks' pids to $SIM_DIR/step.pids.
Installed as three scripts on PATH, each `exec PYTHON slurm_stubs.py NAME "$@"`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil

SIM = os.environ["SIM_DIR"]
_VALUED = {"-N", "-n", "-c", "-w", "--nodes", "--ntasks", "--ntasks-per-node", "--cpus-per-task", "--nodelist"}


def _log(line: str) -> None:
    with open(os.path.join(SIM, "calls.log"), "a") as f:
        f.write(line + "\n")


def _step_processes() -> list[psutil.Process]:
    path = os.path.join(SIM, "step.pids")
    if not os.path.exists(path):
        return []
    procs = []
    for pid in open(path).read().split():
        try:
            task = psutil.Process(int(pid))
            procs += [task, *task.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return procs


def _signal_step(sig: int) -> None:
    for p in _step_processes():
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def srun(argv: list[str]) -> int:
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in _VALUED else 1
    cmd = argv[i:]
    nodes = int(os.environ["SLURM_NNODES"])
    tasks = []
    for node in range(nodes):
        env = {**os.environ, "SLURM_NODEID": str(node), "SLURM_PROCID": str(node), "SLURM_LOCALID": "0"}
        tasks.append(subprocess.Popen(cmd, env=env))
    with open(os.path.join(SIM, "step.pids"), "w") as f:
        f.write(" ".join(str(t.pid) for t in tasks))

    def forced(signum, frame):
        _log("srun: forcing job termination")
        _signal_step(signal.SIGKILL)

    signal.signal(signal.SIGTERM, forced)
    rcs = [t.wait() for t in tasks]
    _log(f"srun: tasks exited {rcs}")
    return max(rc if rc >= 0 else 128 - rc for rc in rcs)


def scancel(argv: list[str]) -> int:
    sig = signal.SIGKILL
    for a in argv:
        if a.startswith("--signal="):
            sig = signal.Signals["SIG" + a.split("=", 1)[1].removeprefix("SIG")]
    _signal_step(sig)
    return 0


def scontrol(argv: list[str]) -> int:
    if argv[:2] == ["show", "hostnames"]:
        print("\n".join(os.environ["SIM_HOSTS"].split()))
    return 0


if __name__ == "__main__":
    name, args = sys.argv[1], sys.argv[2:]
    _log(" ".join([name, *args]))
    sys.exit({"srun": srun, "scancel": scancel, "scontrol": scontrol}[name](args))
