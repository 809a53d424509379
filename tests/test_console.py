"""The console may vanish (``multigpu.run.console``): a run whose stdout or stderr reader goes
away (``| head -1``, a closed terminal, a dead parent) goes on, its lines in ``train.log``,
and ends ``completed``, or ``interrupted`` when a signal came too; and the progress, written
to a file or a pipe, is plain lines (``multigpu.callbacks.progress``)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import time
from pathlib import Path

import pytest
from conftest import PROBES_ENV, TINY, run_script, start_script

from multigpu.callbacks.interrupts import sigterm_interrupts, stop_signal
from multigpu.callbacks.progress import is_terminal, progress_line
from multigpu.config.errors import Interrupted
from multigpu.config.launch import Signal, stop_signals
from multigpu.run.console import Console, is_gone

# Two epochs of 4 steps with the progress bar on (TINY turns it off); a few seconds.
RUN = [
    *[a for a in TINY if not a.startswith("callbacks.progress_bar")],
    "data=synthetic",
    "data.num_train=256",
    "data.num_test=64",
    "data.batch_size=64",
    "trainer.max_epochs=2",
    "hydra.run.dir=outputs/run",
]


def record(cwd: Path) -> dict:
    return json.loads((cwd / "outputs" / "run" / "metrics.json").read_text())


def train_log(cwd: Path) -> str:
    return (cwd / "outputs" / "run" / "train.log").read_text()


def pipe_without_reader() -> Console:
    """A console on a pipe whose reader has gone, as stdout is after ``| head -1`` exits."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return Console(io.TextIOWrapper(io.FileIO(write_end, "w"), write_through=True), "stdout")


def test_a_write_to_a_pipe_without_reader_goes_to_dev_null(caplog):
    console = pipe_without_reader()
    assert console.write("a line\n") == len("a line\n") and console.gone
    assert os.readlink(f"/proc/self/fd/{console.fileno()}") == os.devnull
    console.write("and more\n")
    console.flush()
    assert not console.isatty()
    assert "stdout is gone (BrokenPipeError: [Errno 32] Broken pipe)" in caplog.text
    console.close()


def test_only_errors_of_a_stream_gone_are_swallowed():
    assert is_gone(BrokenPipeError(32, "Broken pipe")) and is_gone(OSError(5, "I/O error"))
    assert is_gone(ValueError("I/O operation on closed file."))
    assert not is_gone(BlockingIOError(11, "Resource temporarily unavailable"))
    assert not is_gone(UnicodeEncodeError("ascii", "é", 0, 1, "no"))
    assert not is_gone(OSError(28, "No space left on device"))
    ascii_only = Console(io.TextIOWrapper(io.BytesIO(), encoding="ascii"), "stdout")
    with pytest.raises(UnicodeEncodeError):
        ascii_only.write("é")
    assert not ascii_only.gone


def test_a_progress_line_has_what_the_bar_shows():
    line = progress_line("Epoch 2/10", 117, 235, 5.0, {"loss": 0.512, "test/acc": 0.871})
    assert line == "Epoch 2/10: 117/235 steps in 00:05 (23.4 steps/s), loss=0.512, test/acc=0.871"
    assert progress_line("Epoch 1", 3, None, 0.0, {}) == "Epoch 1: 3 steps in 00:00"
    assert not is_terminal(io.StringIO()) and not is_terminal(object())


def test_a_hang_up_stops_the_run_as_sigterm_does():
    """A closed terminal's SIGHUP: ``Interrupted`` outside Lightning's training (exit 129);
    while Lightning trains, handed to its SIGTERM handling, which stops after the step."""
    before = signal.getsignal(signal.SIGHUP)
    with sigterm_interrupts(), pytest.raises(Interrupted, match="^interrupted by SIGHUP$") as err:
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(1)
    assert err.value.exit_code == 129
    lightnings = []
    with sigterm_interrupts():
        signal.signal(signal.SIGTERM, lambda signum, frame: lightnings.append(signum))
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.1)
        assert lightnings == [signal.SIGTERM]
        assert stop_signal(signal.SIGTERM) == signal.SIGHUP
    assert signal.getsignal(signal.SIGHUP) == before


OUTSIDE_SLURM: dict[str, str] = {}
UNDER_SLURM = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "41"}


# The real-time signals between SIGRTMIN and SIGRTMAX take one path: one of them stands for all.
EACH_STOP = [s for s in stop_signals(OUTSIDE_SLURM) if s.name[:9] not in ("SIGRTMIN+", "SIGRTMAX-")]
EACH_STOP.append(Signal["SIGRTMIN+3"])


@pytest.mark.parametrize("signum", EACH_STOP, ids=lambda s: s.name)
def test_every_stop_signal_ends_the_run_interrupted_by_its_name(signum, monkeypatch):
    """Each signal besides Ctrl-C that would end the process (SIGUSR1 and SIGUSR2 by default end
    it without a word): ``Interrupted`` outside Lightning's training, exit 128 + its number;
    while Lightning trains, handed to its SIGTERM handling and named by ``stop_signal``."""
    for name in UNDER_SLURM:
        monkeypatch.delenv(name, raising=False)
    before = signal.getsignal(signum)
    said = f"^{re.escape(f'interrupted by {signum.name}')}$"
    with sigterm_interrupts(), pytest.raises(Interrupted, match=said):
        os.kill(os.getpid(), signum)
        time.sleep(1)
    assert signal.getsignal(signum) == before
    lightnings = []
    with sigterm_interrupts():
        signal.signal(signal.SIGTERM, lambda number, frame: lightnings.append(number))
        os.kill(os.getpid(), signum)
        time.sleep(0.1)
        assert lightnings == [signal.SIGTERM] and stop_signal(signal.SIGTERM) == signum


def test_under_slurm_the_user_signals_stay_the_time_limits_warning():
    """There SIGUSR1 (or submitit's SIGUSR2) warns of the time limit, and the job is requeued
    (``requeue_on_warning``): not an end of the run."""
    assert {signal.SIGUSR1, signal.SIGUSR2} <= set(stop_signals(OUTSIDE_SLURM))
    assert not {signal.SIGUSR1, signal.SIGUSR2} & set(stop_signals(UNDER_SLURM))
    assert {signal.SIGTERM, signal.SIGHUP} <= set(stop_signals(UNDER_SLURM))


@pytest.mark.parametrize("scontrol", ["refuses", "missing"])
def test_a_requeue_slurm_refuses_is_said(scontrol, tmp_path, monkeypatch, caplog):
    """``scontrol requeue`` failing (a job not requeueable, no scontrol on the node) had gone
    unsaid: the job trained on as if requeued."""
    from multigpu.config.launch import requeue_on_warning

    if scontrol == "refuses":
        fake = tmp_path / "scontrol"
        fake.write_text("#!/bin/sh\necho 'scontrol: error: Invalid job id specified' >&2\nexit 1\n")
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    before = signal.getsignal(signal.SIGUSR1)
    try:
        requeue_on_warning(UNDER_SLURM)
        with caplog.at_level(logging.WARNING, logger="multigpu.config.launch"):
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.1)
    finally:
        signal.signal(signal.SIGUSR1, before)
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == "SLURM's warning signal: requeueing job 41"
    why = "scontrol: error: Invalid job id" if scontrol == "refuses" else "[Errno 2] No such file"
    assert said[1].startswith(f"job 41 is not requeued (scontrol requeue: {why}")
    assert said[1].endswith(
        "it trains on until Slurm's time limit stops it, with its last checkpoint kept"
    )


def wait_for(proc, ready) -> None:
    deadline = time.monotonic() + 120
    while not ready():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_run_piped_into_head_completes_with_its_lines_in_train_log(tmp_path):
    """``python train.py ... | head -1``: the reader goes after the first line."""
    proc = start_script("train.py", *RUN, cwd=tmp_path, lines=(1, None))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    assert stdout.count("\n") == 1 and "strategy=single" in stdout
    assert "Traceback" not in stderr and "Logging error" not in stderr, stderr[-3000:]
    assert record(tmp_path)["status"] == "completed" and record(tmp_path)["epochs"] == 2
    log = train_log(tmp_path)
    assert "stdout is gone (BrokenPipeError: [Errno 32] Broken pipe): the run goes on" in log
    assert "strategy=single" in log and "Epoch 1/2: 4/4 steps" in log and "Epoch 2/2: 4/4" in log


@pytest.mark.subprocess
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_console_gone_with_a_signal_leaves_the_run_interrupted(signum, tmp_path):
    """The parent dies (its process group gets SIGTERM; the speedrun whose parent died had
    been recorded ``failed``: BrokenPipeError), or the terminal is closed (its jobs get
    SIGHUP): the readers of stdout and stderr go, then the signal comes."""
    slow = ["+callbacks.slow._target_=probes.SlowAfterEpoch", "+callbacks.slow.epoch=1"]
    every_step = "callbacks.progress_bar.lines_every_s=0"  # stdout is written at every step
    overrides = [*RUN, "data.num_train=1024", *slow, "+callbacks.slow.seconds=0.2", every_step]
    proc = start_script("train.py", *overrides, cwd=tmp_path, env=PROBES_ENV)
    checkpoint = tmp_path / "outputs" / "run" / "checkpoints" / "last.ckpt"
    wait_for(proc, checkpoint.exists)  # epoch 2's 16 steps take 3 s or more
    proc.close_outputs()
    wait_for(proc, lambda: "stdout is gone" in train_log(tmp_path))  # a step's line
    proc.send_signal(signum)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum
    ended = record(tmp_path)
    assert ended["status"] == "interrupted" and ended["epochs"] == 1, ended
    assert ended[
        "reason"
    ] == f"interrupted by {signum.name}; resume with ckpt_path={checkpoint} " + (
        "(or ckpt_path=latest)"
    )
    assert "Traceback" not in train_log(tmp_path)


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_stopped_run_with_its_own_checkpoint_folder_goes_on_as_its_line_says(tmp_path):
    """``callbacks.checkpoint.dirpath=ck``: the line said "resume with ckpt_path=ck/last.ckpt",
    and that added to the command was refused (ck holds another run's checkpoints)."""
    slow = ["+callbacks.slow._target_=probes.SlowAfterEpoch", "+callbacks.slow.epoch=1"]
    overrides = [*RUN, "data.num_train=1024", *slow, "+callbacks.slow.seconds=0.2"]
    overrides.append(f"callbacks.checkpoint.dirpath={tmp_path / 'ck'}")
    proc = start_script("train.py", *overrides, cwd=tmp_path, env=PROBES_ENV)
    checkpoint = tmp_path / "ck" / "last.ckpt"
    wait_for(proc, checkpoint.exists)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr[-3000:]
    advice = f"resume with ckpt_path={checkpoint} and another callbacks.checkpoint.dirpath"
    assert stderr.strip().splitlines()[-1] == f"error: interrupted by SIGTERM; {advice}"
    again = [o for o in overrides if not o.startswith(("+callbacks.slow", "hydra.run.dir"))]
    again += [f"ckpt_path={checkpoint}", f"callbacks.checkpoint.dirpath={tmp_path / 'ck2'}"]
    resumed = run_script("train.py", *again, cwd=tmp_path, env=PROBES_ENV)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (tmp_path / "ck2" / "last.ckpt").is_file()


@pytest.mark.slow
@pytest.mark.subprocess
def test_sigusr1_outside_slurm_ends_the_run_interrupted_with_its_checkpoint(tmp_path):
    """``kill -USR1 <pid>``: the run had ended at once, unrecorded (the signal's default)."""
    slow = ["+callbacks.slow._target_=probes.SlowAfterEpoch", "+callbacks.slow.epoch=1"]
    overrides = [*RUN, "data.num_train=1024", *slow, "+callbacks.slow.seconds=0.2"]
    proc = start_script("train.py", *overrides, cwd=tmp_path, env=PROBES_ENV)
    checkpoint = tmp_path / "outputs" / "run" / "checkpoints" / "last.ckpt"
    wait_for(proc, checkpoint.exists)  # epoch 2's 16 steps take 3 s or more
    proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGUSR1, stderr[-3000:]
    reason = f"interrupted by SIGUSR1; resume with ckpt_path={checkpoint} (or ckpt_path=latest)"
    assert stderr.strip().splitlines()[-1] == f"error: {reason}"
    ended = record(tmp_path)
    assert ended["status"] == "interrupted" and ended["epochs"] == 1 and ended["reason"] == reason
    assert checkpoint.is_file() and "Traceback" not in stderr


@pytest.mark.slow
@pytest.mark.subprocess
def test_progress_written_to_a_pipe_is_lines(tmp_path):
    """A GPU job's log, Slurm's, ``| tee``: lines, never a bar's frames."""
    every_step = "callbacks.progress_bar.lines_every_s=0"
    result = run_script("train.py", *RUN, every_step, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "\r" not in result.stdout + result.stderr
    progress = [line for line in result.stdout.splitlines() if "] - Epoch " in line]
    assert [line.split("] - ")[1].split(" steps")[0] for line in progress] == [
        *("Epoch 1/2: 1/4", "Epoch 1/2: 2/4", "Epoch 1/2: 3/4", "Epoch 1/2: 4/4"),
        *("Epoch 2/2: 1/4", "Epoch 2/2: 2/4", "Epoch 2/2: 3/4", "Epoch 2/2: 4/4"),
    ]
    assert "loss=" in progress[-1] and "test/acc=" in progress[-1]
    assert progress == [line for line in train_log(tmp_path).splitlines() if "] - Epoch " in line]


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name
)
def test_a_signal_after_the_closing_lines_leaves_a_completed_run_exiting_0(tmp_path, signum):
    """The run completed and said so; a stop signal while the process exits (a second or so,
    with torch loaded) had ended it with 128 + the signal, its record saying completed."""
    import subprocess
    import sys

    from conftest import REPO, process_env

    proc = subprocess.Popen(
        [sys.executable, str(REPO / "train.py"), *RUN],
        cwd=tmp_path,
        env=process_env(None),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    for line in proc.stdout:
        if line.startswith("look at it"):
            proc.send_signal(signum)
            break
    proc.communicate(timeout=60)
    assert proc.returncode == 0 and record(tmp_path)["status"] == "completed"


def test_the_bar_turned_off_in_the_trainer_leaves_the_configured_one_out(tmp_path):
    """``+trainer.enable_progress_bar=false`` with the bar the callbacks configure: Lightning
    refused the pair ("found ProgressBar in callbacks list") once the run's folder and record
    were made; the run now trains without a bar, as asked."""
    from conftest import compose_config

    from multigpu.run.training import train

    overrides = [*RUN[:-1], "trainer.max_epochs=1", "+trainer.enable_progress_bar=false"]
    assert train(compose_config(overrides, tmp_path / "run"))["status"] == "completed"


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler of its own for ``signum`` (``/proc``'s SigCgt)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.M)[1], 16)
    return bool(caught >> (signum - 1) & 1)


TORCHRUN_RANK_1 = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
TORCHRUN_RANK_1 |= {"GROUP_RANK": "0", "TORCHELASTIC_RUN_ID": "x", "MASTER_ADDR": "127.0.0.1"}


@pytest.mark.parametrize(
    ("script", "environ", "said"),
    [
        ("train.py", {}, "error: interrupted by SIGTERM\n"),
        ("eval.py", {}, "error: interrupted by SIGTERM\n"),
        ("train.py", TORCHRUN_RANK_1, ""),  # torchrun stops the others when one is refused
    ],
    ids=["train", "eval", "torchrun_rank_1"],
)
def test_a_stop_signal_during_start_up_is_one_line_and_writes_nothing(
    tmp_path, script, environ, said
):
    """SIGTERM (or SIGHUP, a closed terminal) while the entry point imports and checks its
    command line, before a run's own handling holds it, had ended it without a word. It still
    ends the process by the signal; a run's other processes say nothing."""
    import subprocess
    import sys

    from conftest import REPO, process_env

    proc = subprocess.Popen(
        [sys.executable, str(REPO / script), *TINY, "data=synthetic", "ckpt_path=latest"],
        cwd=tmp_path,
        env=process_env(environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    while not catches(proc.pid, signal.SIGTERM):  # its handler is set first thing
        assert proc.poll() is None
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    assert proc.communicate(timeout=60)[1] == said
    assert proc.returncode == -signal.SIGTERM
    assert list(tmp_path.iterdir()) == []


def test_a_held_stop_signal_after_an_error_line_ends_the_process_without_a_second():
    """A refusal said while a signal was held (a run's folders refused): the signal then ends
    the process by its default, adding no line to the one that said why."""
    import subprocess
    import sys

    code = (
        "import os, signal, sys\n"
        "from multigpu.run.console import guard_console, stops_in_one_line\n"
        "guard_console(); stops_in_one_line()\n"
        "print('error: refused', file=sys.stderr, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
    )
    from conftest import process_env

    done = subprocess.run(
        [sys.executable, "-c", code], env=process_env(None), capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (-signal.SIGTERM, "error: refused\n")


def test_torchs_exit_hook_says_nothing_after_a_stop_during_its_import():
    """Stopped while torch imports (eval.py 2.5-3.7 s in, found by a fresh try), the stop's one
    line was followed by torch's exit hook logging "FakeTensor cache stats:" and its counts at
    INFO, which torch's own logging set-up, done as its import ends, would have kept out."""
    import subprocess
    import sys

    from conftest import process_env

    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"  # as Hydra's job logging
        "from multigpu.run.quiet import TORCH_AT_EXIT, quiet\n"
        "quiet()\n"
        "assert 'torch' not in sys.modules\n"
        "logging.getLogger(TORCH_AT_EXIT).info('FakeTensor cache stats:')\n"  # the hook's line
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=process_env(None), capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (0, "")
