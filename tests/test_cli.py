import subprocess
import sys

from anchorft.cli import COMMANDS, main


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_is_an_error(capsys):
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_every_command_module_has_main():
    import importlib

    for module, _ in COMMANDS.values():
        mod = importlib.import_module(module)
        assert callable(getattr(mod, "main", None)), f"{module} has no main()"


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "anchorft.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip()


def test_help_into_a_pipe_closed_early_prints_no_traceback():
    """`anchorft rl --help | head -0`: the reader has left before the help is printed; the command ends quietly."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "anchorft.cli", "rl", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # before the child has imported anything, so its print meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err
