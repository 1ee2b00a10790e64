"""The SLURM templates (configs/slurm/*.sbatch): shipped by name, rendered for fake allocations of 1 and 2 nodes
(`anchorft configs render`: the template's own text through bash, stand-ins for srun and accelerate), and a 2-node
allocation simulated on one machine (slow): the template's own launch lines, two `accelerate launch` at once
(machine ranks 0 and 1, 127.0.0.1, gloo, one CPU process each), a TERM to the batch shell forwarded as the
template forwards it, the run stopped at a checkpoint, requeued, resumed and finished with a model that loads."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anchorft.cli import main as cli
from anchorft.resources import config_path, configs_dir, shipped_configs
from anchorft.slurm import hostnames, render

TEMPLATES = ("slurm/one-node", "slurm/multi-node")
DEFAULT_TRAIN = ["-m", "anchorft.cli", "train", "--config", "rpsft/qwen2.5-7b-instruct/rpsft"]
STUBS = Path(__file__).with_name("slurm_stubs.py")


def _launches(out: str) -> dict[int, list[str]]:
    """node -> its accelerate command line (as argv), from `render`'s output."""
    lines, node = {}, None
    for line in out.splitlines():
        if line.startswith("node "):
            node = int(line.split()[1])
        elif line.strip().startswith("accelerate "):
            lines[node] = shlex.split(line)
    return lines


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_templates_ship_by_name_and_say_how_they_run():
    assert set(TEMPLATES) <= set(shipped_configs("slurm"))
    for name in TEMPLATES:
        path = config_path(name)
        assert path == configs_dir(f"{name}.sbatch")
        lines = path.read_text().splitlines()
        assert lines[0] == "#!/bin/bash"
        assert lines[1].startswith("# sbatch ") and f"configs/{name}.sbatch" in lines[1]
        text = "\n".join(lines)
        assert "#SBATCH --signal=B:TERM@" in text and "#SBATCH --requeue" in text
        assert "--resume_from_checkpoint" not in text  # a rerun of the same folder resumes by itself
        # the launcher waits for its workers' checkpoint after a TERM, and stops waiting before the time limit
        lead = int(re.search(r"^#SBATCH --signal=B:TERM@(\d+)$", text, re.M).group(1))
        wait = int(re.search(r"^export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=\S*:-(\d+)\}", text, re.M).group(1))
        assert 30 < wait < lead


def test_one_node_stops_and_requeues_as_multi_node_does():
    """The simulated job runs multi-node.sbatch; one-node.sbatch has the same TERM forwarding and requeue, word for
    word (the parts before the srun line and after it)."""

    def parts(name: str) -> tuple[str, str]:
        text = config_path(name).read_text()
        trap = text[text.index("stopping=") : text.index("trap forward_term TERM")]
        return trap, text[text.index("srun_pid=$!") :]

    assert parts("slurm/one-node") == parts("slurm/multi-node")


def test_hostnames_expand_slurm_node_lists():
    assert hostnames("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert hostnames("a1") == ["a1"] and hostnames("n[8-10]-ib") == ["n8-ib", "n9-ib", "n10-ib"]


@pytest.mark.parametrize("nodes", [1, 2])
def test_multi_node_renders_one_launch_per_node(nodes):
    env = {"SLURM_NNODES": str(nodes), "SLURM_JOB_NODELIST": "gpu[07-08]" if nodes == 2 else "gpu07",
           "SLURM_GPUS_ON_NODE": "8", "MAIN_PORT": "29611"}  # fmt: skip
    out = render("slurm/multi-node", env)
    assert out.splitlines()[0].startswith(f"srun --nodes={nodes} --ntasks-per-node=1")
    launches = _launches(out)
    assert sorted(launches) == list(range(nodes))
    for node, argv in launches.items():
        assert argv[:2] == ["accelerate", "launch"]
        assert _flag(argv, "--machine_rank") == str(node)  # the step's own SLURM_NODEID, not the batch shell's
        assert _flag(argv, "--num_machines") == str(nodes)
        assert _flag(argv, "--num_processes") == str(8 * nodes)
        assert _flag(argv, "--main_process_ip") == "gpu07"  # the first host of the node list, on every node
        assert _flag(argv, "--main_process_port") == "29611"
        assert _flag(argv, "--config_file") == str(configs_dir("accelerate/zero2.yaml"))
        assert argv[argv.index("-m") :] == DEFAULT_TRAIN


def test_settings_from_the_environment_reach_every_node():
    env = {"SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "a[1-2]", "GPUS_PER_NODE": "4",
           "RECIPE": "rpsft/llama-3.1-8b-instruct/l2", "ACCELERATE_CONFIG": "accelerate/zero3",
           "OUTPUT_DIR": "/shared/runs/my l2", "TRAIN_ARGS": "--num_train_epochs 3",
           "ACCELERATE_ARGS": "--debug"}  # fmt: skip
    for argv in _launches(render("slurm/multi-node", env)).values():
        assert _flag(argv, "--num_processes") == "8" and _flag(argv, "--config_file").endswith("accelerate/zero3.yaml")
        assert argv[argv.index("--debug") + 1] == "-m"
        tail = ["train", "--config", "rpsft/llama-3.1-8b-instruct/l2", "--output_dir", "/shared/runs/my l2"]
        assert argv[argv.index("anchorft.cli") + 1 :] == [*tail, "--num_train_epochs", "3"]


def test_one_node_renders_the_single_node_launch(capsys):
    assert cli(["configs", "render", "slurm/one-node", "--env", "SLURM_GPUS_ON_NODE=4"]) == 0
    launches = _launches(capsys.readouterr().out)
    assert list(launches) == [0]
    argv = launches[0]
    assert _flag(argv, "--num_processes") == "4" and "--num_machines" not in argv and "--machine_rank" not in argv
    assert argv[argv.index("-m") :] == DEFAULT_TRAIN


def test_render_refusals(capsys, tmp_path):
    assert cli(["configs", "render", "slurm/multi-node", "--env", "SLURM_NNODES"]) == 2
    assert "is not NAME=VALUE" in capsys.readouterr().err
    env = ["SLURM_NNODES=3", "SLURM_JOB_NODELIST=a[1-2]"]
    assert cli(["configs", "render", "slurm/multi-node", "--env", *env]) == 2
    assert "has 2 hosts, SLURM_NNODES is 3" in capsys.readouterr().err
    broken = tmp_path / "broken.sbatch"
    broken.write_text("#!/bin/bash\necho oops >&2\nexit 3\n")
    assert cli(["configs", "render", str(broken)]) == 2
    assert "exited with 3: oops" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_step(sim: Path) -> None:
    """Whatever a failed run left of the simulated step (its tasks and their descendants)."""
    import psutil

    pids = sim / "step.pids"
    for pid in pids.read_text().split() if pids.exists() else []:
        try:
            task = psutil.Process(int(pid))
            for p in [*task.children(recursive=True), task]:
                p.kill()
        except psutil.NoSuchProcess:
            pass


def _stubs(folder: Path) -> None:
    folder.mkdir()
    for name in ("srun", "scancel", "scontrol"):
        (folder / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STUBS}" {name} "$@"\n')
        (folder / name).chmod(0o755)


@pytest.mark.slow
def test_two_nodes_simulated_stop_requeue_and_resume(tiny_model_dir, tmp_path):
    """`bash configs/slurm/multi-node.sbatch` with SLURM_NNODES=2 on this machine: the stand-in srun starts the
    template's step twice at once (SLURM_NODEID 0 and 1), each the template's own `accelerate launch` (ddp.yaml on
    the CPU, one gloo process a node, 127.0.0.1 from the node list). Once a checkpoint is written, TERM goes to the
    batch shell alone (what `--signal=B:TERM@N` does); the template forwards it to the step's processes: both
    ranks stop at the same step with a complete checkpoint, the job exits 143 and asks for a requeue. The same
    script again (the requeued job) resumes from that checkpoint and finishes: a model that loads with every
    weight, the run marked complete."""
    sim, out, data = tmp_path / "sim", tmp_path / "out", tmp_path / "train.jsonl"
    _stubs(tmp_path / "bin")
    sim.mkdir()
    rows = [(f"what is {a} plus {b}", f" the answer is {a + b}") for a in range(6) for b in range(6)]
    data.write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in rows))
    steps = 40
    train_args = [
        "--model_name_or_path", str(tiny_model_dir), "--dataset", str(data), "--max_steps", str(steps),
        "--save_steps", "4", "--per_device_train_batch_size", "2", "--max_length", "32", "--anchor_rank", "4",
        "--anchor_every", "1", "--logging_steps", "1", "--learning_rate", "1e-3", "--warmup_steps", "0",
        "--ddp_backend", "gloo", "--report_to", "none", "--disable_tqdm", "true", "--dataloader_num_workers", "0",
    ]  # fmt: skip
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLURM")},
        "PATH": os.pathsep.join([str(tmp_path / "bin"), str(Path(sys.executable).parent), os.environ["PATH"]]),
        "SIM_DIR": str(sim), "SIM_HOSTS": "127.0.0.1 127.0.0.1",
        "SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "sim[0-1]", "SLURM_NODEID": "0",
        "SLURM_PROCID": "0", "RECIPE": "rpsft/example-tiny-cpu", "ACCELERATE_CONFIG": "accelerate/ddp",
        "ACCELERATE_ARGS": "--mixed_precision no", "GPUS_PER_NODE": "1", "MAIN_PORT": str(_free_port()),
        "OUTPUT_DIR": str(out), "TRAIN_ARGS": " ".join(train_args),
        "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
    }  # fmt: skip
    template = str(config_path("slurm/multi-node"))

    def job(log: Path, stop_after: Path | None = None) -> int:
        with open(log, "w") as f:
            batch = subprocess.Popen(["bash", template], env=env, stdout=f, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 300
            while stop_after is not None and not stop_after.exists():
                assert batch.poll() is None, log.read_text()[-4000:]
                assert time.monotonic() < deadline, log.read_text()[-4000:]
                time.sleep(0.05)
            if stop_after is not None:
                batch.send_signal(signal.SIGTERM)  # sbatch --signal=B:TERM@N: the batch shell only
            return batch.wait(timeout=300)

    t0 = time.monotonic()
    try:
        _simulate(job, tmp_path, sim, out, steps)
    finally:
        _kill_step(sim)
    print(f"simulated 2-node job: {time.monotonic() - t0:.0f} s")


def _simulate(job, tmp_path: Path, sim: Path, out: Path, steps: int) -> None:
    from transformers import AutoModelForCausalLM

    from anchorft.rpsft.checkpoints import last_complete_checkpoint
    from anchorft.runs import read_marker

    rc = job(tmp_path / "job1.log", stop_after=out / "checkpoint-4" / "trainer_state.json")
    log1 = (tmp_path / "job1.log").read_text()
    calls = (sim / "calls.log").read_text()
    assert rc == 143, log1[-4000:]
    # what a stop must leave: both nodes' ranks stopped by the signal, the run marked interrupted, a complete
    # checkpoint (with its anchor) past the one awaited, no final model
    assert log1.count("anchorft train: terminated") == 2, log1[-4000:]
    assert read_marker(out)["status"] == "interrupted"
    stopped = last_complete_checkpoint(out)
    at = int(Path(stopped).name.split("-")[1])
    assert 4 <= at < steps and not (out / "model.safetensors").exists(), log1[-4000:]
    assert (Path(stopped) / "anchor").is_dir()
    # how: the step's processes signalled (not srun, which would SIGKILL them), the job requeued
    assert "scancel --signal=TERM 4242" in calls and "scontrol requeue 4242" in calls, calls
    assert "forcing job termination" not in calls
    assert '--machine_rank "$SLURM_NODEID"' in calls  # srun got the line unexpanded: each node expands its own

    rc = job(tmp_path / "job2.log")  # the requeued job: the same script, environment and folder
    log2 = (tmp_path / "job2.log").read_text()
    assert rc == 0, log2[-4000:]
    assert f"resuming from {stopped}" in log2
    assert read_marker(out)["status"] == "complete"
    state = json.loads((out / "metrics.json").read_text())
    assert state["global_step"] == steps
    model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    print(f"simulated 2-node job: stopped at step {at}, resumed to {steps}")
