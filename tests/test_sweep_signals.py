"""A stop signal between a sweep's jobs: after one job ended, while Hydra makes the next one's
folder and sets up its job, and while ``train`` admits it. SIGTERM and SIGHUP there had ended
the sweep by their default action (status -15 / -1, no line), leaving the next job's folder
with Hydra's files and no ``metrics.json``; a SIGTERM while ``train`` set up the job had
exited 130, its reason carrying OmegaConf's key. Now the sweep stops with one line and
128 + the signal's number, the jobs that ran stay as they ended, the next job has no folder
or an ``interrupted`` record of its settings (as a single run stopped while Hydra sets it up),
and the sweep's command run again runs the jobs left. ``eval.py``'s block stops on the same
``Ending``."""

from __future__ import annotations

import atexit
import json
import shlex
import signal
import time
from pathlib import Path

import pytest
from conftest import PROBES_ENV, compose_config, start_script
from hydra.core.hydra_config import HydraConfig
from hypothesis import assume, given
from hypothesis import strategies as st

from multigpu.callbacks import interrupts
from multigpu.config.errors import Interrupted, UserError
from multigpu.run.resume import going_on

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SWEEP = [
    "data=synthetic",
    "data.num_train=64",
    "data.num_test=32",
    "model.net.width=4",
    "trainer.max_epochs=1",
    "data.num_workers=0",
    "callbacks.progress_bar=null",
    "seed=1,2,3",
]


def again(sweep: Path) -> str:
    return f"the sweep stops; its command run again with hydra.sweep.dir={sweep} runs the jobs left"


@pytest.fixture
def handlers():
    """This process's signal handlers and run state as they were, whatever the test leaves."""
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    yield
    atexit.unregister(interrupts.ignored_until_exit)
    interrupts._ending = None
    interrupts._deferred.clear()
    for signum, handler in before.items():
        signal.signal(signum, handler)


def record_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def stopped_sweep(tmp_path: Path, at: str, job: int, signum: signal.Signals):
    """Run the sweep, held by ``stop_probes.HoldJob`` at ``at`` of job ``job``, and send
    ``signum`` there; (return code, stderr, sweep folder)."""
    sweep, marker = tmp_path / "sweep", tmp_path / "held"
    hold = [
        "+hydra.callbacks.hold._target_=stop_probes.HoldJob",
        f"+hydra.callbacks.hold.at={at}",
        f"+hydra.callbacks.hold.job={job}",
        f"+hydra.callbacks.hold.marker={marker}",
        "+hydra.callbacks.hold.seconds=2",
    ]
    run = start_script(
        "train.py", "-m", *SWEEP, f"hydra.sweep.dir={sweep}", *hold, cwd=tmp_path, env=PROBES_ENV
    )
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-3000:]
        time.sleep(0.02)
    run.send_signal(signum)
    _, stderr = run.communicate(timeout=120)
    return run.returncode, stderr, sweep


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=[s.name for s in STOP_SIGNALS])
def test_a_signal_while_the_next_job_is_set_up_records_it_and_stops_the_sweep(tmp_path, signum):
    """Job 1's folder made and its config written, its ``train`` not started: the job is
    recorded ``interrupted`` with its settings, the sweep stops with one line, and the
    sweep's command run again skips the completed job and runs the others."""
    code, stderr, sweep = stopped_sweep(tmp_path, "job_start", 1, signum)
    assert code == 128 + signum, stderr[-3000:]
    reason = f"interrupted by {signum.name} before training started; {again(sweep)}"
    assert errors(stderr) == [f"error: {reason}"] and "Traceback" not in stderr
    first = record_of(sweep / "seed_1")
    assert first["status"] == "completed"
    second = record_of(sweep / "seed_2")
    assert second["status"] == "interrupted" and second["reason"] == reason
    assert second["settings"]["seed"] == 2
    assert not (sweep / "seed_3").exists()
    if signum != signal.SIGTERM:
        return
    advised = shlex.split(reason.split(" with ")[1].removesuffix(" runs the jobs left"))
    rerun = start_script("train.py", "-m", *SWEEP, *advised, cwd=tmp_path)  # as the line says
    _, said = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, said[-3000:]
    assert record_of(sweep / "seed_1") == first  # skipped, as it was
    assert {record_of(sweep / f"seed_{n}")["status"] for n in (2, 3)} == {"completed"}


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_signal_after_a_job_before_the_next_ones_folder_stops_the_sweep(tmp_path):
    """Job 0 ended, job 1's folder not made yet: the sweep stops with one line and 143, and
    job 1's folder is never made (as a single run's before Hydra makes it)."""
    code, stderr, sweep = stopped_sweep(tmp_path, "job_end", 0, signal.SIGTERM)
    assert code == 143, stderr[-3000:]
    said = f"error: interrupted by SIGTERM between the sweep's jobs: {again(sweep)}"
    assert errors(stderr) == [said] and "Traceback" not in stderr
    assert record_of(sweep / "seed_1")["status"] == "completed"
    assert sorted(p.name for p in sweep.glob("seed_*")) == ["seed_1"]


def test_a_signal_kept_for_the_job_being_set_up_is_its_runs_first(handlers):
    """The sweep's handler keeps the first signal for the job whose folder Hydra made; the
    job's ``Ending`` takes it as its first (later ones ignored), and no other run inherits it."""
    interrupts.defer_stop(signal.SIGHUP)
    interrupts.defer_stop(signal.SIGTERM)  # a later one: the first is the ending
    assert interrupts.deferred_stop() == signal.SIGHUP
    with interrupts.one_ending() as ending:
        assert ending.first == signal.SIGHUP
    assert interrupts.deferred_stop() is None


def test_between_jobs_a_signal_ends_the_sweep_in_one_line(handlers, monkeypatch, capfd):
    """No job being set up (Hydra's config is none between jobs): one line, 128 + the
    signal's number, and every later signal ignored until exit."""
    from multigpu.run import sweep

    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)
    sweep.stop_between_jobs(going_on("multirun/2026-11-28/10-00-00", search=False))
    with pytest.raises(SystemExit) as ended:
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    assert ended.value.code == 143
    said = capfd.readouterr().err.strip().splitlines()  # written to the descriptor itself
    left = again(Path("multirun/2026-11-28/10-00-00"))
    assert said == [f"error: interrupted by SIGTERM between the sweep's jobs: {left}"]
    assert all(signal.getsignal(s) == signal.SIG_IGN for s in STOP_SIGNALS)


def test_between_jobs_a_signal_is_kept_for_the_job_whose_folder_hydra_made(
    handlers, monkeypatch, tmp_path
):
    """Hydra has made the job's folder, and its ``train`` has not started: the signal is
    kept for it (its run records it), and the sweep's handler returns."""
    from multigpu.run import sweep

    monkeypatch.setattr(sweep, "job_being_set_up", lambda: tmp_path)
    sweep.between_jobs(signal.SIGTERM, None)
    sweep.between_jobs(signal.SIGINT, None)
    assert interrupts.deferred_stop() == signal.SIGTERM


def test_a_run_given_a_signal_before_it_starts_records_it_with_its_settings(handlers, tmp_path):
    """``train`` with a signal kept for it: no training, the folder Hydra made gets an
    ``interrupted`` record of the run's settings, and 143 with the record's reason."""
    from multigpu.run.training import train

    folder = tmp_path / "run"
    folder.mkdir()
    cfg = compose_config(["data=synthetic", "model.net.width=4"], folder)
    interrupts.defer_stop(signal.SIGTERM)
    with pytest.raises(Interrupted) as stopped:
        train(cfg)
    assert stopped.value.exit_code == 143
    record = record_of(folder)
    assert record["status"] == "interrupted" and record["reason"] == str(stopped.value)
    assert str(stopped.value).startswith("interrupted by SIGTERM before training started")
    assert record["settings"]["model.net.width"] == 4


def test_a_signal_that_admission_turns_into_a_refusal_is_still_the_runs_ending(
    handlers, monkeypatch, tmp_path
):
    """A signal lands while admission reads the config, which takes the exception for a value
    it cannot resolve (a ``UserError``, exit 2, the sweep going on): the run was interrupted
    by the signal, and is recorded so."""
    from multigpu.run import training

    def admitted_while_stopped(cfg, output_dir):
        try:
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # the run's Ending
        except Interrupted as err:
            raise UserError(f"trainer.default_root_dir cannot be resolved: {err}") from err

    folder = tmp_path / "run"
    folder.mkdir()
    cfg = compose_config(["data=synthetic", "model.net.width=4"], folder)
    monkeypatch.setattr(training, "admit_run", admitted_while_stopped)
    with pytest.raises(Interrupted) as stopped:
        training.train(cfg)
    assert stopped.value.exit_code == 143
    assert record_of(folder)["status"] == "interrupted"
    assert record_of(folder)["settings"]


def test_a_stop_re_raised_by_omegaconf_ends_the_run_by_its_signal():
    """OmegaConf re-raises an exception raised inside it as a new one of its type: a SIGTERM's
    ``Interrupted`` came out with the node's key in its message and exit 130."""
    wrapped = Interrupted("interrupted by SIGTERM\n    full_key: callbacks.checkpoint")
    ended = interrupts.by_first_signal(wrapped, signal.SIGTERM)
    assert isinstance(ended, Interrupted) and ended.exit_code == 143
    assert str(ended) == "interrupted by SIGTERM"
    kept = Interrupted("interrupted by SIGTERM; resume with ...", 143)
    assert interrupts.by_first_signal(kept, signal.SIGTERM) is kept
    failed = UserError("a value")
    assert interrupts.by_first_signal(failed, signal.SIGTERM) is failed


@pytest.mark.parametrize("wrapper", ["omegaconf", "refusal"])
def test_a_stop_that_became_another_error_ends_the_run_by_its_signal(wrapper):
    """A SIGTERM while OmegaConf resolves an interpolation (building the callbacks) came out as
    its ``InterpolationResolutionError``, or as a refusal of the Trainer's arguments: the run
    was recorded failed (exit 1, a traceback) or refused (exit 2). The stop in its causes makes
    it the signal's ending."""
    from omegaconf.errors import InterpolationResolutionError

    try:
        try:
            raise Interrupted("interrupted by SIGTERM", 143)
        except Interrupted as stop:
            if wrapper == "omegaconf":
                raise InterpolationResolutionError("Interrupted raised while resolving") from stop
            raise UserError("trainer: Interrupted raised while resolving") from stop
    except Exception as error:  # noqa: BLE001 - either
        ended = interrupts.by_first_signal(error, signal.SIGTERM)
    assert isinstance(ended, Interrupted) and ended.exit_code == 143
    assert interrupts.by_first_signal(ended, None) is ended


def test_an_evaluation_stopped_by_a_signal_ignores_later_ones_from_exit_on(handlers, monkeypatch):
    """``sigterm_interrupts`` (``eval.py``) is the run's ``Ending``: the first signal stops the
    block, a later one in it is ignored, the handlers before it are back after it, and from
    the interpreter's exit on later signals are ignored (Ctrl-C then SIGTERM had ended
    ``eval.py`` with -15 after its line said SIGINT)."""
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    at_exit = []
    monkeypatch.setattr(interrupts.atexit, "register", lambda *hook: at_exit.append(hook))
    with pytest.raises(KeyboardInterrupt), interrupts.sigterm_interrupts():
        try:
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        finally:
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # ignored: not the first
    assert interrupts.stop_signal(signal.SIGTERM) == signal.SIGTERM  # the block has ended
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before
    ((hook, *arguments),) = at_exit
    hook(*arguments)
    assert all(signal.getsignal(s) == signal.SIG_IGN for s in STOP_SIGNALS)


def test_a_handler_set_while_signals_are_held_stays_and_takes_the_held_signal():
    """A run taking its folders holds stop signals, then sets the handler that records its
    ending: that handler stays after the block, and the held SIGTERM reaches it (not the one
    before, which had ended the process with no record)."""
    import os
    import signal

    from multigpu.callbacks.interrupts import signals_held

    came: list[str] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: came.append("before"))
    try:

        def recording(signum, frame):
            came.append("recorded")

        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.signal(signal.SIGTERM, recording)
        assert came == ["recorded"] and signal.getsignal(signal.SIGTERM) is recording
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_signal_while_signals_are_held_acts_once_the_block_has_ended():
    """``signals_held`` (Optuna telling a trial's result): a SIGTERM inside waits for the
    block's end, then reaches the handler that was there before."""
    import os
    import signal

    from multigpu.callbacks.interrupts import signals_held

    came: list[str] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: came.append("handled"))
    try:
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            came.append("block ended")
        assert came == ["block ended", "handled"]
    finally:
        signal.signal(signal.SIGTERM, before)


@given(st.text(st.characters(codec="utf-8", exclude_characters="\0\n\r"), min_size=1))
def test_the_stop_line_names_a_setting_that_reads_back_as_the_sweeps_folder(folder):
    """The setting the line names, pasted into a shell and read by Hydra's grammar, is the
    sweep's folder again (a plain path as it is, any other one quoted)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    assume("${" not in folder)  # an interpolation: a sweep's folder is resolved already
    sweep, search = going_on(folder, search=False), going_on(folder, search=True)
    setting = sweep.removeprefix("the sweep stops; its command run again with ")
    setting = setting.removesuffix(" runs the jobs left")
    assert search == f"the search stops; its command run again with {setting} goes on with it"
    words = shlex.split(setting)
    assert len(words) == 1
    (override,) = OverridesParser.create().parse_overrides(words)
    assert override.key_or_group == "hydra.sweep.dir"
    assert str(override.value()) == folder


def test_a_stop_during_a_held_block_comes_after_it_and_its_programs_do_not_get_it():
    """sbatch runs in the terminal's process group: a Ctrl-C there killed it, and the jobs it
    had submitted went unknown. Within ``signals_held`` a stop waits, for the programs it
    starts too, and is answered after the block."""
    import os
    import signal
    import subprocess

    from multigpu.callbacks.interrupts import signals_held

    came: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: came.append(signum))
    try:
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            status = subprocess.run(
                ["grep", "SigBlk", "/proc/self/status"], capture_output=True, text=True
            ).stdout
            assert came == []
        blocked = int(status.split()[-1], 16)
        assert blocked & (1 << (signal.SIGTERM - 1)) and blocked & (1 << (signal.SIGINT - 1))
        assert came == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, before)
