"""What the launcher's environment says about this process: whether a cluster launcher (torchrun,
SLURM's srun, a submitit job) started it as one of many, how many, how often it was restarted,
and the run folder's name that every process of the run derives alike. Torch-free.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime

from multigpu.config.errors import UserError, plain_or_quoted
from multigpu.config.names import SET_BY_THE_RUN, TRAINER_ARGUMENTS

log = logging.getLogger(__name__)

# torchrun sets these for every worker (Lightning 2.6's TorchElasticEnvironment.detect).
TORCHRUN_VARIABLES = ("RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


# An LSF job's jsrun task, as Lightning 2.6's LSFEnvironment.detect knows one: LSB_JOBID alone
# is any process of the job (its batch script's too), which Lightning runs alone.
LSF_VARIABLES = ("LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE")


# Where a launcher gives a process its rank, the run-wide one first.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def launched_rank(environ: Mapping[str, str]) -> str:
    """This process's rank as the launcher's environment says it ("0": none says one)."""
    return next((environ[k].strip() for k in RANK_VARIABLES if k in environ), "0")


def torchrun_started(environ: Mapping[str, str]) -> bool:
    return all(name in environ for name in TORCHRUN_VARIABLES)


def slurm_started(environ: Mapping[str, str]) -> bool:
    """srun (or a submitit job) outside an interactive allocation (as Lightning 2.6's
    SLURMEnvironment.detect decides)."""
    interactive = environ.get("SLURM_JOB_NAME") in ("bash", "interactive")
    return "SLURM_NTASKS" in environ and not interactive


def cluster_started(environ: Mapping[str, str]) -> bool:
    """A cluster launcher already started one process per device."""
    return torchrun_started(environ) or slurm_started(environ)


# What a launcher's mark promises beside it, which Lightning reads as soon as it sees the mark
# (a KeyError from deep inside it, after the run's folder was made): torchrun's run id
# (TorchElasticEnvironment.detect is ``torch.distributed.is_torchelastic_launched``: the id
# alone) and srun's task count (SLURMEnvironment, outside an interactive allocation).
# {mark: (launcher, whether Lightning takes the environment for its launch, what it reads)}
PROMISED: dict[str, tuple[str, Callable[[Mapping[str, str]], bool], tuple[str, ...]]] = {
    "TORCHELASTIC_RUN_ID": (
        "torchrun",
        lambda environ: "TORCHELASTIC_RUN_ID" in environ,
        ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ),
    "SLURM_NTASKS": ("srun", slurm_started, ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID")),
}


def check_promised(environ: Mapping[str, str]) -> None:
    """Each launcher's mark comes with the variables its launcher sets beside it."""
    for mark, (launcher, launched, needed) in PROMISED.items():
        if not launched(environ):
            continue
        if missing := [name for name in needed if name not in environ]:
            raise UserError(
                f"{mark}={environ[mark]} is set, but not {', '.join(missing)}, which {launcher} "
                f"sets with it: unset {mark} (left over from another job?), or start the run "
                f"with {launcher}"
            )


# Each rank with the count it is a rank of (from 0): one beyond it names no process of the run.
RANKS = (
    ("RANK", "WORLD_SIZE"),
    ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
)
# Lightning gives the Trainer any argument it is not passed from PL_TRAINER_<ARGUMENT>: behind
# the config and the run's record (``PL_TRAINER_LIMIT_TRAIN_BATCHES=1`` trained one batch an
# epoch, recorded as whole epochs).
TRAINER_DEFAULTS = "PL_TRAINER_"
NUMBER = re.compile(r"\s*[0-9]+\s*")  # a process number or a port, as int() reads it (ASCII)


# What says which process of a run this is: Lightning and ``multigpu.storage.record.is_rank_zero``
# read them, and a process that is not rank 0 writes no record, no lock, no metrics.
PROCESS_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK")
PROCESS_VARIABLES += ("LOCAL_WORLD_SIZE", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
# Each launcher that sets them, known by what it sets besides: torchrun (its run id, which it
# always sets), a SLURM job (srun's tasks, an interactive allocation), LSF's jsrun, and
# Lightning's own start of DDP's other processes (or a cluster set up by hand as Lightning
# documents): rank 0's address.
LAUNCHERS: dict[str, Callable[[Mapping[str, str]], bool]] = {
    "torchrun": lambda environ: torchrun_started(environ) and "TORCHELASTIC_RUN_ID" in environ,
    "SLURM": lambda environ: slurm_started(environ) or "SLURM_JOB_ID" in environ,
    "LSF": lambda environ: all(name in environ for name in LSF_VARIABLES),
    "Lightning's DDP": lambda environ: "MASTER_ADDR" in environ and "MASTER_PORT" in environ,
}
# What only a launcher's own child holds: srun's rank beyond the first, and a rank beside
# Lightning's rendezvous address (a cluster set up by hand as Lightning documents sets only
# NODE_RANK and WORLD_SIZE there; Lightning sets a process's rank in the processes it starts).
CHILD_RANKS = ("RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "JSM_NAMESPACE_RANK")
# The process whose Lightning starts DDP's other processes: they inherit it, and it is their
# parent; set by hand, or left over in a shell, it names no parent.
PARENT = "MULTIGPU_DDP_PARENT"


def mark_parent() -> None:
    """Name this process as the parent of the processes Lightning may start from it; one that
    holds a rank keeps the mark it inherited (``started_as_a_child`` compares it)."""
    if not any(name in os.environ for name in CHILD_RANKS):
        os.environ[PARENT] = str(os.getpid())


def started_by_rank_zero() -> bool:
    """Whether this process is one that rank 0 of a DDP run started as a script of its own
    (``start_method: popen``): it inherited rank 0's mark with a local rank Lightning gave it,
    and rank 0 records and says how the run ended (``multiprocessing``'s ``spawn`` children are
    not scripts: their rank 0 has no watch). A run started by a process that only marked
    itself (a notebook, a tool) has no local rank."""
    import multiprocessing

    inherited = os.environ.get(PARENT) == str(os.getppid())
    ranked = os.environ.get("LOCAL_RANK", "0") != "0"
    return inherited and ranked and multiprocessing.parent_process() is None


# The ranks a cluster's launcher sets itself in the tasks it starts; any other rank there comes
# from Lightning's DDP starting processes from one task (an interactive allocation).
OWN_RANKS = {"SLURM": ("SLURM_PROCID",), "LSF": ("JSM_NAMESPACE_RANK",), "torchrun": CHILD_RANKS}


def started_as_a_child(environ: Mapping[str, str], launcher: str) -> bool:
    """Whether a rank this launcher sets only in its own children is one of theirs: srun's
    rank beyond the first in an srun task, any other rank in a process Lightning started."""
    if (
        launcher == "SLURM"
        and environ.get("SLURM_PROCID", "0") != "0"
        and not slurm_started(environ)
    ):
        return False
    others = [n for n in CHILD_RANKS if n in environ and n not in OWN_RANKS.get(launcher, ())]
    return not others or environ.get(PARENT) == str(os.getppid())


def launcher_of(environ: Mapping[str, str]) -> str | None:
    """The launcher whose variables the environment holds, if any."""
    return next((name for name, started in LAUNCHERS.items() if started(environ)), None)


def check_launched(environ: Mapping[str, str]) -> None:
    """A rank, local rank or world size promises that a launcher started this process as one of
    a run's. Set by hand (an export left over, a command copied from a launcher's log) it is
    believed: ``LOCAL_RANK=1`` trained alone as rank 1, which writes nothing, and exited 0
    without a record or a lock. Refused unless a launcher's other variables are there too."""
    for name in sorted(n for n in environ if n.startswith(TRAINER_DEFAULTS) and environ[n]):
        argument = name.removeprefix(TRAINER_DEFAULTS).lower()  # Lightning skips an empty one
        if argument in TRAINER_ARGUMENTS:
            value = plain_or_quoted(environ[name])
            instead = (
                f"set trainer.{argument} in the config (+trainer.{argument}=... where it has none)"
            )
            if argument in SET_BY_THE_RUN:
                instead = f"the run sets {argument} from {SET_BY_THE_RUN[argument]}"
            raise UserError(
                f"{name}={value} is set: Lightning would give the Trainer {argument}={value} "
                f"behind the config and the run's record; unset {name}, and {instead}"
            )
    check_rendezvous(environ)
    given = [name for name in PROCESS_VARIABLES if name in environ]
    counts = [n for _, n in RANKS if n in environ and n not in given]
    for name in (n for n in (*given, *counts) if not NUMBER.fullmatch(environ[n])):
        raise UserError(
            f"{name}={environ[name]!r} is not a process number (launchers set 0, 1, ...): "
            f"unset {name}, or start the run with torchrun or srun"
        )
    for rank, size in RANKS:
        if rank in environ and size in environ and int(environ[rank]) >= int(environ[size]):
            raise UserError(
                f"{rank}={environ[rank]} is not a process of {size}={environ[size]} (ranks "
                f"count from 0 to {size} - 1): unset {rank} and {size}, or start the run with "
                "torchrun or srun"
            )
    check_promised(environ)
    check_lsf_hosts(environ)
    launcher = launcher_of(environ)
    shown = " ".join(f"{name}={environ[name]}" for name in given)
    if given and launcher is not None and not started_as_a_child(environ, launcher):
        raise UserError(
            f"{shown} is set, but {launcher} did not start this process (it sets a rank only "
            f"in the processes it starts itself): unset {' '.join(given)}, or start the run "
            "with torchrun or srun"
        )
    if not given or launcher is not None:
        return
    if "TORCHELASTIC_RUN_ID" in environ:  # torchrun's id, without all it sets beside
        missing = ", ".join(name for name in TORCHRUN_VARIABLES if name not in environ)
        raise UserError(
            f"{shown} is set with TORCHELASTIC_RUN_ID={environ['TORCHELASTIC_RUN_ID']}, but "
            f"not {missing}, which torchrun sets with them: unset {' '.join(given)} and "
            "TORCHELASTIC_RUN_ID (left over from another job?), or start the run with torchrun"
        )
    raise UserError(
        f"{shown} is set, but no launcher started this process (torchrun, srun and "
        "Lightning's DDP set it together with TORCHELASTIC_RUN_ID, SLURM_JOB_ID or "
        f"MASTER_ADDR and MASTER_PORT): unset {' '.join(given)}, or start the run with "
        "torchrun or srun"
    )


def check_lsf_hosts(environ: Mapping[str, str]) -> None:
    """An LSF task's rank file lists the job's hosts, the launch host first, then the compute
    hosts, this one among them: Lightning finds its node there (an IndexError or a KeyError from
    deep inside it, after the run's folder was made, where it cannot)."""
    if not LAUNCHERS["LSF"](environ):
        return
    rankfile, host = environ["LSB_DJOB_RANKFILE"], socket.gethostname()
    try:
        with open(rankfile) as lines:
            hosts = [line.strip() for line in lines][1:]
    except (OSError, UnicodeError, ValueError) as err:
        hosts, said = [], f"cannot be read ({getattr(err, 'strerror', None) or type(err).__name__})"
    else:
        said = f"does not list this host, {host}, after its launch host"
    if host not in hosts:
        raise UserError(
            f"LSB_DJOB_RANKFILE={rankfile!r} {said}: unset LSB_JOBID and LSB_DJOB_RANKFILE "
            "(left over from another job?), or start the run with jsrun"
        )


def check_rendezvous(environ: Mapping[str, str]) -> None:
    """Where DDP's processes meet: ``MASTER_PORT`` a TCP port and ``MASTER_ADDR`` a host this
    machine can find, else a traceback from deep in torch after the run's folder was made
    (an unknown host: after ``strategy.timeout_s``, its words those of a peer that failed)."""
    port, address = environ.get("MASTER_PORT"), environ.get("MASTER_ADDR")
    if port is not None and not (NUMBER.fullmatch(port) and 1 <= int(port) <= 65535):
        raise UserError(
            f"MASTER_PORT={port!r} is not a TCP port (1 to 65535): unset it (Lightning picks a "
            "free one), or give a free port, e.g. MASTER_PORT=29500"
        )
    if address is None:
        return
    try:
        socket.getaddrinfo(address, None)
    except (OSError, UnicodeError) as err:
        reason = getattr(err, "strerror", None) or type(err).__name__
        raise UserError(
            f"MASTER_ADDR={address!r} is no host this machine can find ({reason}): unset it "
            "(one machine: Lightning uses 127.0.0.1), or give rank 0's host name or address"
        ) from None


def check_port_free(environ: Mapping[str, str]) -> None:
    """The first process of a DDP run Lightning starts opens ``MASTER_PORT`` for the others to
    meet at: one another program holds was a traceback after the run's folder was made."""
    port = environ.get("MASTER_PORT")
    if port is None or any(name in environ for name in PROCESS_VARIABLES):
        return  # Lightning picks a free one; a process it started meets at its parent's
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's store opens it
        try:
            probe.bind(("", int(port)))
        except OSError as err:
            raise UserError(
                f"MASTER_PORT={port.strip()} cannot be opened for DDP's processes to meet at "
                f"({err.strerror or type(err).__name__}): unset it (Lightning picks a free one), "
                "or give a free port"
            ) from None


# Overrides that say where a run reads and writes, or how it shows: no part of its name.
UNNAMED_NODES = ("hydra", "paths", "callbacks", "logger")
UNNAMED_KEYS = ("data.root", "data.source", "data.download", "data.num_workers")
# Characters of the overrides in a run's name, whole ones, then "-etc".
MAX_LABEL = 40


def label_part(key: str, value: str) -> str:
    """``key_value`` in the characters a Hydra override takes unquoted, so that the run's
    checkpoint path can be passed back as it is printed (``ckpt_path=outputs/...``): a list's
    items joined by ``+`` (``devices_0+1``), anything else that is not a letter, digit or
    ``._-+@%`` as ``_``."""
    value = re.sub(r"[\[\]{}()'\"]", "", value).replace(",", "+")
    return re.sub(r"[^\w.\-+@%]", "_", f"{key}_{value}")


def run_label(overrides: Iterable[str]) -> str:
    """What the command line changed (``lr_0.2-devices_2``): each override's key by its last
    part, as a sweep's jobs are named (``multigpu.config.job_names``), and a file by its name,
    leaving out the ``UNNAMED_NODES`` and ``UNNAMED_KEYS``; at most ``MAX_LABEL`` characters. The
    parts are joined by ``-``, the one character after which TensorBoard's run list (about 28
    characters wide) breaks a line: a longer stretch would be cut there, and would widen the
    column for every run."""
    from multigpu.config.job_names import short_names

    values = {}  # a key given twice counts once, with the value Hydra takes: the last
    for override in overrides:
        key, _, value = str(override).lstrip("+~").partition("=")
        if re.split(r"[./]", key, maxsplit=1)[0] not in UNNAMED_NODES and key not in UNNAMED_KEYS:
            values[key] = value.rstrip("/").rsplit("/", 1)[-1]
    names = short_names(list(values))
    parts = [label_part(names[key].rsplit("/", 1)[-1], value) for key, value in values.items()]
    label = "-".join(parts)
    while len(label) > MAX_LABEL and len(parts) > 1:
        parts.pop()
        label = "-".join([*parts, "etc"])
    if len(label) > MAX_LABEL:
        label = label[: MAX_LABEL - 4] + "-etc"
    return label.rstrip(".")  # TensorBoard takes a run named "x." for a run "." inside "x"


def run_name(environ: Mapping[str, str] | None = None, overrides: Iterable[str] = ()) -> str:
    """The run folder's name, the same in every process of a run without any talking: SLURM's
    job (array task) and step, torchrun's run id (``--rdzv-id``; ``--standalone`` makes one),
    else the start time, to the microsecond (which keeps two runs started in the same second
    apart), then what the command line ``overrides`` changed (``run_label``):
    ``2026-11-25/12-32-46.813825-lr_0.2-devices_2``."""
    environ = os.environ if environ is None else environ
    named = launchers_name(environ)
    if named is not None:
        return named
    started = datetime.now().strftime("%Y-%m-%d/%H-%M-%S.%f")
    label = run_label(overrides or ())
    return f"{started}-{label}" if label else started


def launchers_name(environ: Mapping[str, str]) -> str | None:
    """The run folder's name a launcher gives (its job's or run's id: every command it starts
    with that id names the same folder), or None."""
    from multigpu.config.job_names import escape  # a launcher's id as one folder's name

    if slurm_started(environ) and "SLURM_JOB_ID" in environ:
        job = environ.get("SLURM_ARRAY_JOB_ID")
        job = f"{job}_{environ['SLURM_ARRAY_TASK_ID']}" if job else environ["SLURM_JOB_ID"]
        return escape(f"slurm-{job}.{environ.get('SLURM_STEP_ID', 'batch')}")
    run_id = environ.get("TORCHELASTIC_RUN_ID", "none")
    if torchrun_started(environ) and run_id != "none":
        return escape(f"torchrun-{run_id}")
    return None


def renamed_by(environ: Mapping[str, str]) -> str:
    """What gives a command run again another run folder when no ``hydra.run.dir`` names it:
    the time it starts (""), else another id of the launcher that named this one."""
    named = launchers_name(environ) or ""
    if named.startswith("torchrun-"):
        return " with another torchrun --rdzv-id"
    return " in another Slurm job or srun step" if named.startswith("slurm-") else ""


def processes_started(environ: Mapping[str, str]) -> tuple[int, int]:
    """(this process's rank, how many) a cluster launcher started it among ((0, 1): none did;
    a SLURM batch script counts as its job's first task)."""
    if torchrun_started(environ):
        return int(environ["RANK"]), int(environ.get("WORLD_SIZE", "1"))
    if slurm_started(environ):
        return int(environ.get("SLURM_PROCID", "0")), int(environ.get("SLURM_NTASKS", "1"))
    return 0, 1


def check_world(environ: Mapping[str, str], per_node: int, nodes: int, per_device: bool) -> None:
    """The processes a cluster launcher started must be the ones the config asks for: one per
    device under DDP (``trainer.devices`` x ``trainer.num_nodes``), else one; and a process
    that says it is one of several must have been started by a launcher."""
    check_launched(environ)
    started = processes_started(environ)[1]
    if torchrun_started(environ):
        on_node = int(environ.get("LOCAL_WORLD_SIZE", "1"))
        fix = f"torchrun --nproc_per_node={per_node} --nnodes={nodes}"
    elif slurm_started(environ):
        on_node = int(re.match(r"\d*", environ.get("SLURM_NTASKS_PER_NODE", ""))[0] or 0)
        fix = f"#SBATCH --nodes={nodes} --ntasks-per-node={per_node}"
        if per_device and not on_node and started > 1:
            raise UserError(
                f"SLURM started {started} tasks without --ntasks-per-node: Lightning places "
                f"one process per device on each node from it: use {fix}"
            )
    else:
        return
    if not per_device:
        if started > 1:
            raise UserError(
                f"the launcher started {started} processes, but this strategy runs in one: "
                "use strategy=ddp for one process per device, or start one process"
            )
        return
    if started != per_node * nodes or (on_node and on_node != per_node):
        raise UserError(
            f"the launcher started {started} processes ({on_node or '?'} per node), but "
            f"trainer.devices={per_node} x trainer.num_nodes={nodes} asks for "
            f"{per_node * nodes}: use {fix}, or change trainer.devices / trainer.num_nodes"
        )


# Every signal, by the name ``kill -l`` gives it: Python's ``signal.Signals`` names no real-time
# signal between SIGRTMIN and SIGRTMAX (Linux's), and a run must say which one stopped it.
LOW, HIGH = getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", 0)
Signal = enum.IntEnum(
    "Signal",
    {s.name: int(s) for s in signal.Signals}
    | {f"SIGRTMIN+{n - LOW}": n for n in range(LOW + 1, (LOW + HIGH) // 2 + 1)}
    | {f"SIGRTMAX-{HIGH - n}": n for n in range((LOW + HIGH) // 2 + 1, HIGH)},
)
# A soft CPU-time limit (ulimit -S -t: SIGXCPU; the hard one kills) and an alarm (SIGALRM) end a
# process by default too. Python ignores SIGPIPE and SIGXFSZ (a write past ulimit -f fails
# instead: a failed write, recorded).
LIMITS = (signal.SIGXCPU, signal.SIGALRM)
STOPS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, *LIMITS, signal.SIGUSR1, signal.SIGUSR2)
# The other signals whose default ends a process without a word (``man 7 signal``): SIGIO,
# SIGPROF, SIGVTALRM, SIGPWR, SIGSTKFLT and the real-time ones; and those that dump its core,
# as ``kill`` sends them (a real abort() ends the process before any handler of Python's runs).
# A hardware fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL) is left alone: a handler that returns
# would run the faulting instruction again, for ever.
QUIET = ("SIGIO", "SIGPROF", "SIGVTALRM", "SIGPWR", "SIGSTKFLT")  # those a system has
QUIET += ("SIGABRT", "SIGTRAP", "SIGSYS")
QUIET_ENDS = tuple(s for s in Signal if s.name in QUIET or s.name.startswith("SIGRTM"))
# What whoever started this process set stays theirs: a signal it was started ignoring (``nohup``
# ignores SIGHUP, to outlive the terminal) stays ignored, and of the quiet ones only those left
# at their default are stops (a profiler's SIGPROF stays the profiler's). Read when the package's
# checks load, before any handler of the run's is set.
IGNORED_AT_START = frozenset(s for s in STOPS if signal.getsignal(s) == signal.SIG_IGN)
QUIET_AT_START = tuple(s for s in QUIET_ENDS if signal.getsignal(s) == signal.SIG_DFL)


def stop_signals(environ: Mapping[str, str]) -> tuple[Signal, ...]:
    """The signals besides Ctrl-C that end a run, which must then end ``interrupted`` with its
    checkpoint, as SIGTERM does: a job's end (SIGTERM), a closed terminal (SIGHUP), SIGQUIT
    (Ctrl-\\ on a terminal), a limit reached (``LIMITS``), and SIGUSR1 and SIGUSR2 (``kill
    -USR1``: by default they end a process without a word). Under SLURM these two are the
    warning before a time limit, which ``requeue_on_warning`` (or submitit's own handler)
    answers: there they stay theirs. One the process was started ignoring
    (``IGNORED_AT_START``) is left ignored. Then every other signal that would end the process
    unrecorded, where nothing else handles it (``QUIET_AT_START``)."""
    users = () if slurm_started(environ) else (signal.SIGUSR1, signal.SIGUSR2)
    ends = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, *LIMITS, *users)
    return tuple(Signal(s) for s in ends if s not in IGNORED_AT_START) + QUIET_AT_START


@contextlib.contextmanager
def answering_stops(answer: Callable[[Signal], None]) -> Iterator[None]:
    """Within the block, Ctrl-C and the ``stop_signals`` are answered by ``answer`` (which may
    raise or exit), once: the first ignores the later ones. In the main thread only (the one
    Python delivers signals to); the handlers before are put back after the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, *stop_signals(os.environ))

    def first(signum: int, frame: object) -> None:
        for each in signals:
            signal.signal(each, signal.SIG_IGN)
        answer(Signal(signum))

    before = {each: signal.signal(each, first) for each in signals}
    try:
        yield
    finally:
        for each, handler in before.items():
            signal.signal(each, handler)


def requeue_on_warning(environ: Mapping[str, str]) -> None:
    """SLURM's warning before a time limit (``#SBATCH --signal=USR1@90``) requeues the job;
    SLURM then stops it, and the requeued job resumes from its last checkpoint. Under a
    submitit job, submitit's own handler does this instead."""
    if not slurm_started(environ) or "SUBMITIT_EXECUTOR" in environ:
        return
    job = environ.get("SLURM_ARRAY_JOB_ID")
    job = f"{job}_{environ['SLURM_ARRAY_TASK_ID']}" if job else environ.get("SLURM_JOB_ID")
    is_rank_zero = environ.get("SLURM_PROCID", "0") == "0"

    def requeue(signum: int, frame: object) -> None:  # every task gets it; one asks
        if not (is_rank_zero and job):
            return
        log.warning("SLURM's warning signal: requeueing job %s", job)
        try:
            asked = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
            refused = asked.returncode and (asked.stderr.strip() or f"exit {asked.returncode}")
        except OSError as err:  # no scontrol here
            refused = str(err)
        if refused:  # it had gone unsaid, and the job trained on as if requeued
            log.warning(
                "job %s is not requeued (scontrol requeue: %s): it trains on until Slurm's time "
                "limit stops it, with its last checkpoint kept",
                job,
                " ".join(str(refused).split()),
            )

    signal.signal(signal.SIGUSR1, requeue)
