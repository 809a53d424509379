"""``PeerWatch`` over real child processes: it names the first one to fail, stands down when
rank 0 ends the run itself, and records then kills a rank 0 that is stuck."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from multigpu.strategies.peer_watch import PeerWatch


def child(code: int, after_s: float = 0.0) -> subprocess.Popen:
    program = f"import sys, time; time.sleep({after_s}); sys.exit({code})"
    return subprocess.Popen([sys.executable, "-c", program])


def test_the_first_failed_process_is_named_with_its_global_rank():
    children = [child(0), child(4, after_s=0.2), child(5, after_s=3)]
    watch = PeerWatch(children, first_rank=5, grace_s=60)
    failure = watch.failed_peer(wait_s=10)
    assert failure == f"rank 6 (pid {children[1].pid}) exited with code 4"
    assert watch.stopped.is_set()
    for c in children:
        c.kill()
        c.wait()


def test_waiting_for_a_failed_peer_ends_when_every_process_succeeded():
    children = [child(0), child(0)]
    started = time.monotonic()
    assert PeerWatch(children, first_rank=1, grace_s=60).failed_peer(wait_s=30) is None
    assert time.monotonic() - started < 10


def test_a_watch_stood_down_kills_nothing():
    children = [child(3, after_s=0.1)]
    watch = PeerWatch(children, first_rank=1, grace_s=0.5, poll_s=0.05)
    watch.start()
    time.sleep(0.4)  # the failure is seen and the grace begins
    watch.stopped.set()
    watch.join(timeout=5)
    assert not watch.is_alive() and watch.failure is not None  # and this process lives on


@pytest.mark.slow
def test_a_stuck_rank_0_is_recorded_and_killed_after_the_grace(tmp_path):
    """In a process of its own: the watch ends it with SIGKILL, after recording why."""
    record = tmp_path / "reason.txt"
    program = textwrap.dedent(f"""
        import subprocess, sys, time
        from pathlib import Path
        from multigpu.strategies.peer_watch import PeerWatch
        failing = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
        healthy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        Path({str(record)!r}).with_suffix(".pid").write_text(str(healthy.pid))
        said = lambda outcome: Path({str(record)!r}).write_text(outcome.reason)
        PeerWatch([failing, healthy], 1, grace_s=1, give_up=said, poll_s=0.1).start()
        time.sleep(60)  # stuck outside any collective
    """)
    started = time.monotonic()
    stuck = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=60)
    assert stuck.returncode == -signal.SIGKILL, stuck.stderr.decode()[-2000:]
    assert time.monotonic() - started < 30
    reason = record.read_text()
    assert reason.startswith("rank 1 (pid ") and "exited with code 7" in reason
    assert "rank 0 did not stop within 1 s" in reason
    healthy_pid = int(record.with_suffix(".pid").read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(healthy_pid):
        time.sleep(0.1)
    assert not alive(healthy_pid)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie awaiting its dead parent's reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_process_ended_by_a_stop_signal_is_told_from_one_that_failed():
    """A peer that exited 128 + a stop signal (its own handler's exit) or was ended by one
    stopped the run; any other exit status is a failure."""

    stopped = child(128 + signal.SIGTERM)
    killed = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 1)"])
    failed = child(7)
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for process, expected in ((stopped, signal.SIGTERM), (killed, signal.SIGHUP), (failed, None)):
        watch = PeerWatch([process], first_rank=1, grace_s=60)
        assert watch.failed_peer(wait_s=30) is not None
        assert watch.stop_signal(stops) == expected


def test_the_watch_stands_down_for_the_runs_own_kill_not_for_a_stop_passed_on():
    """Lightning passes a SIGTERM rank 0 gets on to the processes it started, which end at
    once: rank 0 may then wait on them in a collective, so the watch stays up to end the run
    interrupted. Only the SIGKILL that ends the run is rank 0's own ending."""
    from multigpu.strategies.ddp import WatchedScriptLauncher

    launcher = WatchedScriptLauncher.__new__(WatchedScriptLauncher)  # no cluster to start
    launcher.procs, launcher.watch = [], PeerWatch([], first_rank=1, grace_s=60)
    launcher.kill(signal.SIGTERM)
    assert not launcher.watch.stopped.is_set()
    launcher.kill(signal.SIGKILL)
    assert launcher.watch.stopped.is_set()


def test_the_watch_stands_down_once_training_has_ended():
    """After the fit's last collective, a process of the run that is stopped ends only itself:
    rank 0 goes on to draw the test figures and record the run completed, rather than being
    ended ``interrupted`` after the grace (a watch stood down kills nothing: above)."""
    from multigpu.strategies.ddp import BoundedDDPStrategy, WatchedScriptLauncher

    launcher = WatchedScriptLauncher.__new__(WatchedScriptLauncher)  # no cluster to start
    launcher.procs, launcher.watch = [], PeerWatch([], first_rank=1, grace_s=60)
    strategy = BoundedDDPStrategy()
    strategy._launcher = launcher
    assert not launcher.watch.stopped.is_set()
    strategy.on_train_end()
    assert launcher.watch.stopped.is_set()


def test_a_started_worker_is_told_by_its_mark_and_its_local_rank(monkeypatch):
    """A process that rank 0 started inherits rank 0's mark (its parent's pid) and a local
    rank; one started by a process that marked itself without launching DDP (a notebook, a
    tool) has no local rank, and says its own stop line."""
    import os

    from multigpu.config.launch import PARENT, started_by_rank_zero

    monkeypatch.setenv(PARENT, str(os.getppid()))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert not started_by_rank_zero()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert started_by_rank_zero()
    monkeypatch.setenv(PARENT, str(os.getpid()))  # rank 0 itself: its own mark
    assert not started_by_rank_zero()
