"""Real ``python train.py`` processes without the interpreter's start-up.

Importing torch, torchvision and Lightning costs each process about 8 s of CPU here, more than
most test runs train. So the tests fork their runs from a server that imported them once
(multiprocessing's ``forkserver`` with a preload list, one server per pytest worker): each run
is still its own process, with its own ``sys.argv``, working folder, environment, file
descriptors 1 and 2, signals and exit status, running the script as ``__main__``. What a warm
process cannot show is start-up itself: the tests of what is imported before a run is refused,
and of what imports print, run a cold ``python`` (``conftest.run_script(..., cold=True)``, or
any run watched with ``PYTHONPROFILEIMPORTTIME``). tests/test_warm.py compares the two.
"""

from __future__ import annotations

import atexit
import io
import multiprocessing
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

# What every run imports before it trains; imported once, in the server, never run there.
PRELOAD = ["torch", "torchvision", "pytorch_lightning", "hydra", "multigpu.run.fit"]

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def run_warm(
    script: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """``python script *args`` in ``cwd`` with ``env``, forked from the warm server; the same
    answer as ``subprocess.run(..., capture_output=True, text=True, timeout=timeout)``."""
    process = WarmProcess(script, args, cwd, env)
    stdout, stderr = process.communicate(timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


class WarmProcess:
    """What the tests use of ``subprocess.Popen(..., stdout=PIPE, stderr=PIPE, text=True)``,
    for a process forked from the warm server."""

    def __init__(
        self,
        script: str,
        args: list[str],
        cwd: Path,
        env: dict[str, str],
        lines: tuple[int | None, int | None] = (None, None),
    ):
        """``lines``: for stdout and stderr, after how many lines their reader goes away, as
        ``| head -n N`` does (``None``: read to the end)."""
        self.args = [sys.executable, script, *args]
        self.folder = tempfile.TemporaryDirectory()
        self.outputs = [
            Output(Path(self.folder.name, name), limit)
            for name, limit in zip(("stdout", "stderr"), lines, strict=True)
        ]
        paths = [str(output.path) for output in self.outputs]
        self.process = _context.Process(
            target=run_as_main, args=(script, args, str(cwd), env, *paths)
        )
        self.process.start()
        self.pid = self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def send_signal(self, signum: int) -> None:
        if self.process.exitcode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def close_outputs(self) -> None:
        """Its reader goes away, as when the parent that reads its output dies."""
        for output in self.outputs:
            output.go_away()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the process, then for every process holding its output (a DDP rank left
        behind) to close it, as ``Popen.communicate`` does; (stdout, stderr)."""
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        self.process.join(timeout)
        timed_out = self.process.exitcode is None
        if timed_out:
            self.process.kill()
            self.process.join()
        for output in self.outputs:
            output.release()  # the process has opened its own ends, or never will
        closed = [output.wait(deadline) for output in self.outputs]
        said = [output.text() for output in self.outputs]
        self.folder.cleanup()
        if timed_out or not all(closed):
            raise subprocess.TimeoutExpired(self.args, timeout, *said)
        return said[0], said[1]


class Output:
    """One of the process's outputs: a named pipe, read to its end as ``communicate`` reads,
    or until its reader goes away (``lines`` read, as ``head -n`` exits, or ``go_away``, as a
    parent process dies): later writes to it fail with ``BrokenPipeError``."""

    def __init__(self, path: Path, lines: int | None = None):
        self.path, self.lines = path, lines
        os.mkfifo(path)
        self.read_end = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.held = os.open(path, os.O_WRONLY)  # no end of file before the process opens it
        os.set_blocking(self.read_end, True)
        self.chunks: list[bytes] = []
        self.leaving = threading.Event()
        self.reader = threading.Thread(target=self.drain, daemon=True)
        self.reader.start()

    def drain(self) -> None:
        """Read until the end, or until the reader goes away: then close the read end here,
        in the one thread that reads it."""
        while not self.gone():
            if select.select([self.read_end], [], [], 0.05)[0]:
                chunk = os.read(self.read_end, 1 << 16)
                if not chunk:
                    return
                self.chunks.append(chunk)
        os.close(self.read_end)  # no reader is left on the pipe
        self.read_end = None

    def gone(self) -> bool:
        read = b"".join(self.chunks).count(b"\n")
        return self.leaving.is_set() or (self.lines is not None and read >= self.lines)

    def go_away(self) -> None:
        """The reader closes its end now, whatever it has read."""
        self.leaving.set()
        self.reader.join()

    def release(self) -> None:
        if self.held is not None:
            os.close(self.held)
            self.held = None

    def wait(self, deadline: float) -> bool:
        """Whether every writer closed it by ``deadline``."""
        self.reader.join(max(0.0, deadline - time.monotonic()))
        if self.reader.is_alive():
            return False
        if self.read_end is not None:
            os.close(self.read_end)
        return True

    def text(self) -> str:
        """Decoded with universal newlines, as ``text=True`` decodes."""
        return io.TextIOWrapper(io.BytesIO(b"".join(self.chunks)), errors="replace").read()


def run_as_main(script: str, args: list[str], cwd: str, env: dict, out: str, err: str) -> None:
    """In the forked process: become ``python script *args`` as far as the script can tell."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as a terminal delivers it
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        opened = os.open(path, os.O_WRONLY)
        os.dup2(opened, fd)
        os.close(opened)
    # Unbuffered as PYTHONUNBUFFERED=1 makes them: what a killed process said is kept.
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    python_path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [str(Path(script).resolve().parent), *python_path]
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        at_exit()
        raise  # multiprocessing makes its code the exit status, as the interpreter does
    except KeyboardInterrupt as stop:  # the interpreter's way: the traceback, then die of SIGINT
        print_traceback(stop, script)
        at_exit()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException as error:  # the traceback alone, exit 1 (not multiprocessing's lines)
        print_traceback(error, script)
        at_exit()
        raise SystemExit(1) from None
    at_exit()


def print_traceback(error: BaseException, script: str) -> None:
    """The traceback from the script's own frame on, as a cold ``python script`` prints it."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__)


def at_exit() -> None:
    """What the interpreter runs at exit, which a forked process's ``os._exit`` skips."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
