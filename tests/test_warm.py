"""The warm runs the suite forks (tests/warm.py) are what a cold ``python script`` is, to the
script and to whoever runs it: argv, folder, environment, output, exit status, signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from conftest import process_env, run_script, start_script

# A script that reports what it sees, then ends the way its first argument says.
SCRIPT = """
import os, subprocess, sys
print("argv", sys.argv[1:], "cwd", os.getcwd(), "name", __name__, "env", os.environ["PROBE"])
print("to stderr", file=sys.stderr)
how = sys.argv[1]
if how == "exit":
    sys.exit(3)
if how == "raise":
    raise ValueError("on purpose")
if how == "child":  # a process left behind holding stdout, as a DDP rank can be
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1); print('late')"])
if how == "wait":
    print("ready", flush=True)
    import time
    time.sleep(60)
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(SCRIPT)
    return path


@pytest.mark.parametrize("how", ["exit", "raise", "child", "normal"])
def test_a_warm_run_is_what_a_cold_run_is(how, script, tmp_path):
    runs = [
        run_script(str(script), how, "x y", cwd=tmp_path, env={"PROBE": "1"}, cold=cold)
        for cold in (True, False)
    ]
    cold, warm = runs
    assert (warm.returncode, warm.stdout, warm.stderr) == (
        cold.returncode,
        cold.stdout,
        cold.stderr,
    )
    assert f"cwd {tmp_path}" in warm.stdout and "name __main__" in warm.stdout
    assert warm.returncode == {"exit": 3, "raise": 1}.get(how, 0)
    assert ("late" in warm.stdout) == (how == "child")


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)]
)
def test_a_warm_process_dies_of_a_signal_as_a_cold_one(signum, script, tmp_path):
    """Ctrl-C: a KeyboardInterrupt, then the interpreter dies of SIGINT; SIGTERM: killed."""
    cold = subprocess.Popen(
        [sys.executable, str(script), "wait"],
        cwd=tmp_path,
        env=process_env({"PROBE": "1"}),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    warm = start_script(str(script), "wait", cwd=tmp_path, env={"PROBE": "1"})
    ended = []
    for process in (cold, warm):
        time.sleep(1.5)  # past its first lines
        process.send_signal(signum)
        out, err = process.communicate(timeout=30)
        ended.append((process.returncode, "KeyboardInterrupt" in err))
    assert ended[0] == ended[1] == (-signum, signum == signal.SIGINT)
