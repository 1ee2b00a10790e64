"""A SLURM template rendered without a cluster: the launch lines it runs on each node (`anchorft configs render`).

`render` runs the template's own text through bash, as the batch job would, with stand-ins for `srun`,
`scontrol`, `scancel` and `accelerate` first on PATH: the stand-in `srun` runs its step once per node with that
node's SLURM_NODEID / SLURM_PROCID (as srun does; the batch shell keeps node 0's), and the stand-in `accelerate`
prints its command line instead of launching. What is checked is what runs, quoting and expansion included.
`hostnames` expands a SLURM node list as `scontrol show hostnames` does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from anchorft.resources import config_path

__all__ = ["render", "hostnames"]

# srun: its options (those with a separate value named), then the step's command, run once per node with that
# node's variables; a header line per node, then what the step prints
_SRUN = r"""#!/usr/bin/env bash
opts=()
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
    case "$1" in
        *=*) opts+=("$1"); shift ;;
        -N|-n|-c|-w|--nodes|--ntasks|--ntasks-per-node|--cpus-per-task|--gpus-per-node|--nodelist)
            opts+=("$1 $2"); shift 2 ;;
        *) opts+=("$1"); shift ;;
    esac
done
echo "srun ${opts[*]}"
i=0
for host in $ANCHORFT_RENDER_HOSTS; do
    echo "node $i ($host):"
    SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 SLURM_STEP_ID=0 SLURMD_NODENAME=$host "$@" || exit $?
    i=$((i + 1))
done
"""
_SCONTROL = r"""#!/usr/bin/env bash
if [ "$1 $2" = "show hostnames" ]; then printf '%s\n' $ANCHORFT_RENDER_HOSTS; else echo "scontrol $*" >&2; fi
"""
_SCANCEL = """#!/usr/bin/env bash
echo "scancel $*" >&2
"""
_ACCELERATE = r"""#!/usr/bin/env bash
line=accelerate
for a in "$@"; do line+=" $(printf '%q' "$a")"; done
echo "  $line"
"""
# the batch shell's SLURM variables when --env does not set them (sbatch sets these on node 0)
_BATCH_ENV = {"SLURM_JOB_ID": "1", "SLURM_JOB_NAME": "anchorft", "SLURM_NODEID": "0", "SLURM_PROCID": "0",
              "SLURM_LOCALID": "0"}  # fmt: skip


def hostnames(nodelist: str) -> list[str]:
    """The hosts of a SLURM node list, as `scontrol show hostnames` prints them: `gpu[01-03,07],login1` ->
    gpu01, gpu02, gpu03, gpu07, login1 (one bracket group a name; zero padding kept)."""
    hosts = []
    for name in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)?", nodelist):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", name)
        if m is None:
            hosts.append(name)
            continue
        head, ranges, tail = m.groups()
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{head}{n:0{len(lo)}d}{tail}")
    return hosts


def _sbatch_nodes(text: str) -> int:
    m = re.search(r"^#SBATCH\s+(?:--nodes[= ]|-N\s*)(\d+)", text, re.M)
    return int(m.group(1)) if m else 1


def render(template: str | os.PathLike, env: dict[str, str] | None = None, timeout: float = 60) -> str:
    """What the SLURM template `template` (a name or a file) runs: its srun line and each node's `accelerate`
    line, for the batch job's variables `env` (SLURM_NNODES, SLURM_JOB_NODELIST, RECIPE, ...; SLURM_NNODES
    defaults to the template's #SBATCH --nodes, the node list to node[1-N]). The SLURM variables of this shell are
    not used, the others are (as sbatch exports them). ValueError with the template's error when it fails."""
    path = config_path(template, "NAME")
    env = dict(env or {})
    nnodes = env.setdefault("SLURM_NNODES", str(_sbatch_nodes(path.read_text())))
    env.setdefault("SLURM_JOB_NUM_NODES", nnodes)
    env.setdefault("SLURM_JOB_NODELIST", f"node[1-{nnodes}]" if int(nnodes) > 1 else "node1")
    hosts = hostnames(env["SLURM_JOB_NODELIST"])
    if len(hosts) != int(nnodes):
        raise ValueError(f"--env: SLURM_JOB_NODELIST {env['SLURM_JOB_NODELIST']} has {len(hosts)} hosts, "
                         f"SLURM_NNODES is {nnodes}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="anchorft-render-") as tmp:
        stubs = {"srun": _SRUN, "scontrol": _SCONTROL, "scancel": _SCANCEL, "accelerate": _ACCELERATE}
        # `anchorft` is this installation, wherever its console script is
        stubs["anchorft"] = f'#!/usr/bin/env bash\nexec "{sys.executable}" -m anchorft "$@"\n'
        for name, text in stubs.items():
            (Path(tmp) / name).write_text(text)
            (Path(tmp) / name).chmod(0o755)
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        run_env.update(_BATCH_ENV)
        run_env.update(env)
        run_env["PATH"] = tmp + os.pathsep + os.environ.get("PATH", "")
        run_env["ANCHORFT_RENDER_HOSTS"] = " ".join(hosts)
        res = subprocess.run(["bash", str(path)], env=run_env, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        tail = "; ".join(res.stderr.strip().splitlines()[-3:])
        raise ValueError(f"{template}: the template exited with {res.returncode}: {tail}")
    return res.stdout
