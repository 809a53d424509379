"""The checkpoint reader (``multigpu.storage.checkpoint.load_checkpoint``): whatever a file holds,
it is either returned whole and consistent (every field Lightning and train.py read exists, with the
type and the counts they expect) or refused in one ``UserError`` line that names the file and what
is wrong; never another exception, never a hang. Real checkpoints come from one tiny
in-process training run; the damage is named (cases attackers found) or generated (Hypothesis:
structural edits with the digest recomputed, so the structure check is what must catch them;
truncated and flipped bytes)."""

from __future__ import annotations

import copy
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from conftest import TINY, compose_config, examples, run_script
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from multigpu.config.errors import UserError
from multigpu.storage.checkpoint import (
    DIGEST,
    check_resumable,
    classifier,
    digest,
    epoch_history,
    finished_epochs,
    load_checkpoint,
    load_network,
    stored_settings,
)
from multigpu.storage.checkpoint_model import HISTORY, RESUME_STATE
from multigpu.storage.ckpt_path import checkpoint_file

FEW = examples(50)
HISTORY_PATH = ("callbacks", HISTORY, "history")
EPOCH_PROGRESS = ("loops", "fit_loop", "epoch_progress")


# Real checkpoints, made once -------------------------------------------------------------------
TRAINED = [*TINY, "data.train_subset=256", "data.test_subset=128", "trainer.max_epochs=2"]
TRAINED += ["logger=csv", "+model/scheduler=cosine", "model.optimizer.momentum=0.9"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_root) -> Path:
    """Two epochs of a narrow network with momentum and a cosine schedule, so that every part
    of a checkpoint is there (optimizer state, a scheduler, a two-epoch history)."""
    from multigpu.run.training import train

    out = tmp_path_factory.mktemp("trained")
    summary = train(compose_config([*TRAINED, f"data.root={data_root}"], out))
    assert summary["status"] == "completed", summary
    return out / "checkpoints"


@pytest.fixture(scope="module")
def real(trained) -> dict[str, Any]:
    """The last checkpoint as torch reads it (copied before each change)."""
    return torch.load(trained / "last.ckpt", map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One file rewritten by every generated example (Hypothesis reuses the test function)."""
    return tmp_path_factory.mktemp("scratch") / "edited.ckpt"


def save(checkpoint: dict[str, Any], path: Path, with_digest: bool = True) -> Path:
    """``checkpoint`` as train.py would write it after an edit that also recomputed the digest:
    the digest check passes, and the structure check is what must refuse it."""
    checkpoint = dict(checkpoint)
    checkpoint.pop(DIGEST, None)
    if with_digest:
        checkpoint[DIGEST] = digest(checkpoint)
    torch.save(checkpoint, path)
    return path


def refused(path: Path) -> str:
    """The one line ``load_checkpoint`` refuses ``path`` with; it names the file."""
    with pytest.raises(UserError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert "\n" not in message and message.strip() == message, message
    assert f"ckpt_path={path}" in message, message
    error = caught.value  # no chained traceback under it
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
    return message


def get(checkpoint: Any, path: tuple) -> Any:
    for key in path:
        if not isinstance(checkpoint, (dict, list)):  # an earlier change put a value here
            raise TypeError(f"no container at {key!r}")
        checkpoint = checkpoint[key]
    return checkpoint


# Named cases ------------------------------------------------------------------------------------
def deep_list(depth: int) -> list:
    top = inner = []
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return top


def set_history(c: dict, epochs: list[int]) -> None:
    entry = get(c, HISTORY_PATH)[0]
    get(c, HISTORY_PATH[:-1])["history"] = [{**entry, "epoch": e} for e in epochs]


def edit(path: tuple, value: Any):
    def change(c: dict) -> None:
        get(c, path[:-1])[path[-1]] = value

    return change


def remove(path: tuple):
    def change(c: dict) -> None:
        del get(c, path[:-1])[path[-1]]

    return change


def mid_epoch(c: dict) -> None:
    """The counts of a checkpoint written inside its third epoch."""
    for key in ("current", "total"):
        get(c, EPOCH_PROGRESS)[key].update(ready=3, started=3)


def shared_tree(c: dict) -> None:
    """Two references to one list, 20 times over: 2**20 values to walk, in a small file."""
    node: list = [1]
    for _ in range(20):
        node = [node, node]
    c["extra"] = node


def holding_itself(c: dict) -> None:
    loop: list = [1]
    loop.append(loop)
    c["extra"] = loop


NAMED = {
    "state_dict_a_list": (
        lambda c: c.update(state_dict=list(c["state_dict"].values())),
        "is malformed: state_dict is a list of ",
    ),
    "state_dict_entry_a_dict": (
        edit(("state_dict", "net.0.weight"), {"weight": 1}),
        "state_dict['net.0.weight'] is a dict of 1 key(s), expected a tensor",
    ),
    "weights_nan": (
        lambda c: c["state_dict"]["net.0.weight"].view(-1)[0].fill_(float("nan")),
        "state_dict['net.0.weight'] holds NaN or infinite values",
    ),
    "running_var_inf": (
        lambda c: next(v for k, v in c["state_dict"].items() if "running_var" in k).fill_(
            float("inf")
        ),
        "holds NaN or infinite values",
    ),
    "hyper_parameters_a_list": (
        lambda c: c.update(hyper_parameters=[1, 2]),
        "hyper_parameters is a list of 2, expected a dict",
    ),
    "hyper_parameters_missing": (
        remove(("hyper_parameters",)),
        "records no network settings (hyper_parameters.net)",
    ),
    "net_setting_a_list": (
        edit(("hyper_parameters", "net", "width"), [4]),
        "hyper_parameters.net.width is a list of 1, expected a plain value",
    ),
    "epoch_a_string": (edit(("epoch",), "abc"), "epoch is 'abc', expected an integer >= 0"),
    "epoch_negative": (edit(("epoch",), -1), "epoch is -1, expected an integer >= 0"),
    "epoch_a_float": (edit(("epoch",), 1.0), "epoch is 1.0, expected an integer >= 0"),
    "global_step_a_bool": (edit(("global_step",), True), "global_step is True, expected an"),
    "version_0_5_0": (
        edit(("pytorch-lightning_version",), "0.5.0"),
        "was written by Lightning 0.5.0, older than 2.4 (the oldest this project wrote with)",
    ),
    "version_banana": (
        edit(("pytorch-lightning_version",), "banana"),
        "records pytorch-lightning_version='banana', not a version number",
    ),
    "version_a_number": (
        edit(("pytorch-lightning_version",), 2.5),
        "records pytorch-lightning_version=2.5, not a version number",
    ),
    "version_newer": (
        edit(("pytorch-lightning_version",), "99.0"),
        f"newer than the installed {pl.__version__}",
    ),
    "loops_empty": (edit(("loops",), {}), "loops.fit_loop is missing"),
    "fit_loop_empty": (edit(("loops", "fit_loop"), {}), "loops.fit_loop.state_dict is missing"),
    "epoch_progress_missing": (
        remove(EPOCH_PROGRESS),
        "loops.fit_loop.epoch_progress is missing",
    ),
    "epoch_progress_counter_a_string": (
        edit((*EPOCH_PROGRESS, "current", "completed"), "1"),
        "loops.fit_loop.epoch_progress.current.completed is '1', expected an integer",
    ),
    "epoch_progress_mid_epoch": (
        mid_epoch,
        "expected ready = started = processed",
    ),
    "epoch_disagrees_with_loops": (
        edit(("epoch",), 0),
        "epoch is 0 but loops.fit_loop.epoch_progress has 1 completed",
    ),
    "global_step_disagrees_with_loops": (
        edit(("global_step",), 99),
        "global_step is 99 but the loop state counts 2 optimizer steps",
    ),
    "history_shortened": (
        lambda c: set_history(c, [1]),
        "the history holds 1 epoch(s) but the loop state counts 2 finished",
    ),
    "history_extended": (
        lambda c: set_history(c, [1, 2, 3]),
        "the history holds 3 epoch(s) but the loop state counts 2 finished",
    ),
    "history_renumbered": (
        lambda c: set_history(c, [1, 1]),
        "callbacks.EpochHistory.history numbers its epochs [1, 1], expected 1 to 2",
    ),
    "history_a_dict": (
        edit(HISTORY_PATH, {}),
        "callbacks.EpochHistory.history is a dict of 0 key(s), expected a list",
    ),
    "history_value_a_string": (
        lambda c: get(c, HISTORY_PATH)[1].update(test_acc="high"),
        "callbacks.EpochHistory.history[1].test_acc is 'high', expected a number or null",
    ),
    "history_callback_missing": (
        remove(("callbacks", HISTORY)),
        "callbacks.EpochHistory is missing",
    ),
    "optimizer_states_empty": (
        edit(("optimizer_states",), []),
        "optimizer_states is empty",
    ),
    "optimizer_state_a_list": (
        edit(("optimizer_states", 0, "state"), []),
        "optimizer_states[0].state is a list of 0, expected a dict",
    ),
    "param_group_lr_a_string": (
        edit(("optimizer_states", 0, "param_groups", 0, "lr"), "fast"),
        "optimizer_states[0].param_groups[0].lr is 'fast', expected a number",
    ),
    "params_out_of_order": (
        lambda c: get(c, ("optimizer_states", 0, "param_groups", 0, "params")).reverse(),
        "optimizer_states[0].param_groups number the parameters",
    ),
    "param_group_key_missing": (
        remove(("optimizer_states", 0, "param_groups", 0, "momentum")),
        "optimizer_states[0].param_groups[0].momentum is missing",
    ),
    "param_group_lr_nan": (
        edit(("optimizer_states", 0, "param_groups", 0, "lr"), float("nan")),
        "optimizer_states[0].param_groups[0].lr is nan, expected a number >= 0",
    ),
    "momentum_buffer_a_number": (
        edit(("optimizer_states", 0, "state", 0, "momentum_buffer"), 0.5),
        "optimizer_states[0].state[0].momentum_buffer is 0.5, expected a tensor or null",
    ),
    "scheduler_without_last_epoch": (
        remove(("lr_schedulers", 0, "last_epoch")),
        "lr_schedulers[0].last_epoch is missing",
    ),
    "normalize_not_a_flag": (
        edit(("datamodule_hyper_parameters", "normalize"), "yes"),
        "datamodule_hyper_parameters.normalize is 'yes', expected true or false",
    ),
    "test_loop_counter_negative": (
        edit(("loops", "test_loop", "batch_progress", "total", "ready"), -1),
        "loops.test_loop.batch_progress.total.ready is -1, expected an integer >= 0",
    ),
    "lr_schedulers_dropped": (
        edit(("lr_schedulers",), []),
        "lr_schedulers holds 0 state(s) but hyper_parameters.scheduler names one",
    ),
    "scheduler_ahead_of_the_epochs": (
        edit(("lr_schedulers", 0, "last_epoch"), 9),
        "lr_schedulers[0].last_epoch is 9 after 2 finished epoch(s)",
    ),
    "callbacks_a_list": (edit(("callbacks",), []), "callbacks is a list of 0, expected a dict"),
    "settings_a_list": (
        edit(("settings",), ["seed=1"]),
        "settings is a list of 1, expected a dict of dotted keys or null",
    ),
    "settings_value_a_tensor": (
        edit(("settings",), {"model.optimizer.lr": torch.ones(1)}),
        "settings['model.optimizer.lr'] is a tensor of shape [1], expected a plain value",
    ),
    "a_deep_list": (edit(("extra",), deep_list(3000)), "is malformed: it nests deeper than 32"),
    "a_list_holding_itself": (
        holding_itself,
        "is malformed: it nests deeper than 32",
    ),
    "a_shared_tree": (shared_tree, "is malformed: it holds too many values"),
    "a_sparse_tensor": (
        edit(("state_dict", "net.0.weight"), torch.eye(3).to_sparse()),
        "holds a torch.sparse_coo tensor",
    ),
    "a_meta_tensor": (  # no values: isfinite(...).all() raised a RuntimeError traceback
        edit(("state_dict", "net.0.weight"), torch.empty(3, 3, device="meta")),
        "holds a meta tensor",
    ),
}


@pytest.mark.parametrize("case", sorted(NAMED))
def test_named_damage_is_refused_in_one_line(case, real, tmp_path):
    change, said = NAMED[case]
    checkpoint = copy.deepcopy(real)
    change(checkpoint)
    undigestible = case.startswith(("a_deep", "a_list", "a_shared", "a_sparse", "a_meta"))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))  # torch.save pickles recursively
    try:
        path = save(checkpoint, tmp_path / f"{case}.ckpt", with_digest=not undigestible)
    finally:
        sys.setrecursionlimit(limit)
    message = refused(path)
    assert said in message, message
    if "is malformed" in message:
        assert message.endswith("; it was edited, or not written by train.py"), message


def test_optimizer_state_must_fit_the_network(real, tmp_path):
    """Found once the network is known (eval.py's and a resume's ``check_fits``): torch would
    fail at the first step."""
    checkpoint = copy.deepcopy(real)
    checkpoint["optimizer_states"][0]["state"][0]["momentum_buffer"] = torch.zeros(3)
    path = save(checkpoint, tmp_path / "last.ckpt")
    loaded = load_checkpoint(path)
    with pytest.raises(UserError) as caught:
        classifier(loaded, path)
    assert str(caught.value) == (
        f"ckpt_path={path} has optimizer_states[0].state[0].momentum_buffer of shape [3] for a "
        "parameter of shape [4, 1, 3, 3]; it was edited, or not written by train.py"
    )
    group = checkpoint["optimizer_states"][0]["param_groups"][0]
    checkpoint["optimizer_states"][0]["state"].clear()
    group["params"] = group["params"][:-1]
    path = save(checkpoint, tmp_path / "last.ckpt")
    said = f"holds optimizer state for {len(group['params'])} parameters and its network has"
    with pytest.raises(UserError, match=said):
        classifier(load_checkpoint(path), path)


def test_an_edit_without_a_new_digest_is_damage(real, tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save({**real, "epoch": "abc"}, path)  # the digest written with the original
    assert "is damaged: its contents no longer match the digest" in refused(path)


def test_valid_settings_are_returned(real, tmp_path):
    stored = {"model.optimizer.lr": 0.1, "data.augment": ["flip", "crop"], "seed": None}
    loaded = load_checkpoint(save({**real, "settings": stored}, tmp_path / "last.ckpt"))
    assert stored_settings(loaded) == stored
    loaded = load_checkpoint(save({**real, "settings": None}, tmp_path / "last.ckpt"))
    assert stored_settings(loaded) is None


def test_a_real_checkpoint_reads_whole(trained, real):
    for name, epochs in (("last.ckpt", 2), ("previous.ckpt", 1)):
        loaded = load_checkpoint(trained / name)
        check_resumable(trained / name, loaded)
        assert finished_epochs(loaded) == epochs == loaded["epoch"] + 1
        assert [h["epoch"] for h in epoch_history(loaded)] == list(range(1, epochs + 1))
    module = classifier(real, trained / "last.ckpt")  # eval.py's way
    assert sum(p.numel() for p in module.net.parameters()) > 0
    assert not load_network(trained / "last.ckpt").training


def test_weights_without_training_state_read_for_eval_but_not_for_resume(real, tmp_path):
    weights = {k: real[k] for k in ("state_dict", "hyper_parameters")}
    path = save(weights, tmp_path / "weights.ckpt")
    loaded = load_checkpoint(path)
    with pytest.raises(UserError, match="holds weights but no training state"):
        check_resumable(path, loaded)
    # Training state with one part missing: eval.py reads it, a resume names what is missing.
    path = save({k: v for k, v in real.items() if k != "lr_schedulers"}, tmp_path / "part.ckpt")
    with pytest.raises(UserError, match=r"no training state \(lr_schedulers\)"):
        check_resumable(path, load_checkpoint(path))


@pytest.mark.parametrize("words", ["short reason", " ".join(f"word{i}" for i in range(100))])
def test_torchs_refusal_is_cut_at_a_word(words, monkeypatch, tmp_path):
    path = tmp_path / "any.ckpt"
    path.write_bytes(b"PK\x03\x04 a zip archive's start")

    def refuse(*args, **kwargs):
        raise RuntimeError(words)

    monkeypatch.setattr(torch, "load", refuse)
    message = refused(path)
    reason = message.split("is not a readable checkpoint (", 1)[1].rsplit("): pass", 1)[0]
    if len(words) <= 200:
        assert reason == words
        return
    assert len(reason) <= 200 and reason.endswith("...")
    kept = reason[: -len("...")]
    assert words.startswith(kept) and words[len(kept)] == " "


TORCH_ADVICE = (
    "Weights only load failed. In PyTorch 2.6, we changed the default value of the "
    "`weights_only` argument in `torch.load` from `False` to `True`. Re-running `torch.load` "
    "with `weights_only` set to `False` will likely succeed, but it can result in arbitrary "
    "code execution.\nPlease file an issue: WeightsUnpickler error: \n\nUnsupported operand "
    "31\n\nCheck the documentation of torch.load to learn more."
)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (RuntimeError(TORCH_ADVICE), "(Unsupported operand 31)"),  # not the advice around it
        (KeyError(1149), "(KeyError: 1149)"),  # a bare key says little alone
        (EOFError(), "(EOFError)"),
    ],
    ids=["unpickler", "bare_key", "no_text"],
)
def test_torchs_refusal_says_why(error, reason, monkeypatch, tmp_path):
    path = tmp_path / "any.ckpt"
    path.write_bytes(b"PK\x03\x04 a zip archive's start")

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(torch, "load", refuse)
    assert f"is not a readable checkpoint {reason}: pass a .ckpt file" in refused(path)


# Not a regular file -----------------------------------------------------------------------------
def within_a_second(call) -> BaseException | None:
    """What ``call`` raised, run in a thread that must end within a second (a blocked read of a
    FIFO would not)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            outcome.append(err)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert outcome and time.monotonic() - started < 1, "it did not return within a second"
    return outcome[0]


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_fifo_or_a_device_is_not_a_regular_file(kind, tmp_path):
    path = Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "pipe.ckpt"
        os.mkfifo(path)
    for read in (load_checkpoint, checkpoint_file):  # the checkpoint, and eval.py's first check
        error = within_a_second(lambda read=read: read(path))
        assert isinstance(error, UserError), error
        assert f"ckpt_path={path} is not a regular file (" in str(error)
        assert "\n" not in str(error)


# Generated damage -------------------------------------------------------------------------------
def paths_in(checkpoint: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in the checkpoint (a few of the weights: they are alike)."""
    found = []
    if isinstance(checkpoint, dict):
        items = list(checkpoint.items())
        if prefix == ("state_dict",):
            items = items[:3]
    elif isinstance(checkpoint, list):
        items = list(enumerate(checkpoint))[:3]
    else:
        return found
    for key, value in items:
        if prefix == () and key == DIGEST:
            continue
        found.append((*prefix, key))
        found.extend(paths_in(value, (*prefix, key)))
    return found


REPLACEMENTS = {
    "list": lambda: [1, "a"],
    "empty_list": list,
    "dict": lambda: {"x": 1},
    "empty_dict": dict,
    "str": lambda: "abc",
    "int": lambda: 7,
    "negative": lambda: -1,
    "float": lambda: 2.5,
    "none": lambda: None,
    "bool": lambda: True,
    "tensor": lambda: torch.zeros(3),
    "deep": lambda: deep_list(60),
    # What a strict reader could still take for a number, a list or a dict of names.
    "scalar_tensor": lambda: torch.tensor(0.5),
    "one_value_tensor": lambda: torch.ones(1),
    "nan": lambda: float("nan"),
    "tuple": lambda: (1, 2),
    "numbered_keys": lambda: {0: 1},
}
VERSIONS = ["0.5.0", "1.9.5", "2.3.3", "2.4.0", "2.5.1", pl.__version__, "2.99", "banana", ""]


def mutations(paths: list[tuple]):
    place = st.sampled_from(paths)
    return st.one_of(
        st.tuples(st.just("delete"), place),
        st.tuples(st.just("replace"), place, st.sampled_from(sorted(REPLACEMENTS))),
        st.tuples(st.just("replace_int"), place, st.integers(-3, 2**40)),
        st.tuples(st.just("version"), st.sampled_from(VERSIONS) | st.text(max_size=8)),
        st.tuples(st.just("history"), st.integers(-2, 2)),
        st.tuples(st.just("empty_loops"), st.sampled_from([("loops",), ("loops", "fit_loop")])),
        st.tuples(st.just("settings"), st.sampled_from(sorted(SETTINGS_VALUES))),
    )


SETTINGS_VALUES = {
    "ok": lambda: {"seed": 42, "data.augment": ["flip"]},
    "list": lambda: [1],
    "tensor": lambda: {"a": torch.ones(1)},
    "nested": lambda: {"a": {"b": [None, 1.5]}},
}


def resize_history(checkpoint: dict[str, Any], by: int) -> None:
    try:
        history = get(checkpoint, HISTORY_PATH)
    except (KeyError, IndexError, TypeError):
        return
    if not isinstance(history, list) or not history or not isinstance(history[-1], dict):
        return
    if by < 0:
        del history[by:]
    for _ in range(by):
        history.append({**history[-1], "epoch": len(history) + 1})


def change_at(checkpoint: dict[str, Any], kind: str, path: tuple, arg: Any = None) -> None:
    """Delete or replace the value at ``path``; a place an earlier change removed is skipped."""
    try:
        parent = get(checkpoint, path[:-1])
        parent[path[-1]]
    except (KeyError, IndexError, TypeError):
        return
    if kind == "delete":
        del parent[path[-1]]
    else:
        replacements = {"replace": lambda: REPLACEMENTS[arg](), "replace_int": lambda: arg}
        parent[path[-1]] = replacements.get(kind, dict)()


def mutate(checkpoint: dict[str, Any], change: tuple) -> None:
    """One generated change, in place."""
    kind, *args = change
    if kind == "version":
        checkpoint["pytorch-lightning_version"] = args[0]
    elif kind == "history":
        resize_history(checkpoint, args[0])
    elif kind == "settings":
        checkpoint["settings"] = SETTINGS_VALUES[args[0]]()
    else:
        change_at(checkpoint, kind, *args)


def is_plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def assert_resumable(c: dict[str, Any]) -> None:
    """What Lightning and train.py read when resuming, stated again independently of the
    reader: the fields exist, with the types and the counts they expect."""
    version = Version(c["pytorch-lightning_version"])
    assert Version("2.4") <= version <= Version(pl.__version__)
    assert count(c["epoch"]) and count(c["global_step"])
    assert isinstance(c["optimizer_states"], list) and c["optimizer_states"]
    for state in c["optimizer_states"]:
        assert isinstance(state["state"], dict) and isinstance(state["param_groups"], list)
        for group in state["param_groups"]:
            assert all(count(p) for p in group["params"]) and "lr" in group
    assert isinstance(c["lr_schedulers"], list)
    assert all(isinstance(s, dict) for s in c["lr_schedulers"])
    assert len(c["lr_schedulers"]) == (1 if c["hyper_parameters"].get("scheduler") else 0)
    progress = c["loops"]["fit_loop"]["epoch_progress"]
    assert progress["current"] == progress["total"]
    current = progress["current"]
    assert all(count(current[k]) for k in ("ready", "started", "processed", "completed"))
    assert current["ready"] == current["started"] == current["processed"]
    assert current["completed"] == c["epoch"] in (current["processed"] - 1, current["processed"])
    fit_loop = c["loops"]["fit_loop"]
    steps = fit_loop["epoch_loop.automatic_optimization.optim_progress"]["optimizer"]["step"]
    assert count(steps["total"]["completed"])
    assert count(fit_loop["epoch_loop.state_dict"]["_batches_that_stepped"])
    assert isinstance(fit_loop["epoch_loop.batch_progress"]["is_last_batch"], bool)
    history = c["callbacks"][HISTORY]["history"]
    assert isinstance(history, list) and len(history) == current["processed"]
    first = history[0]["epoch"] if history else 1  # 0: written before record schema 3
    assert [h["epoch"] for h in history] == list(range(first, first + len(history)))
    assert first in (0, 1)
    assert finished_epochs(c) == len(history)


def assert_whole(c: dict[str, Any], path: Path) -> None:
    """A checkpoint ``load_checkpoint`` returned: weights and settings always; all of the
    training state, or ``check_resumable`` refuses it in one line."""
    assert isinstance(c["state_dict"], dict)
    assert all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in c["state_dict"].items()
    )
    net = c["hyper_parameters"]["net"]
    assert isinstance(net, dict) and all(is_plain(v) for v in net.values())
    assert c.get("settings") is None or isinstance(c["settings"], dict)
    assert isinstance(finished_epochs(c), int)
    try:
        classifier(c, path)  # eval.py's network, and the weights and optimizer state fit it
    except UserError as err:
        assert "\n" not in str(err) and f"ckpt_path={path}" in str(err), str(err)
    if all(key in c for key in RESUME_STATE):
        check_resumable(path, c)
        assert_resumable(c)
    else:
        with pytest.raises(UserError) as caught:
            check_resumable(path, c)
        assert "\n" not in str(caught.value)


def check_outcome(path: Path) -> None:
    """Returned whole, or refused in one line: nothing else."""
    try:
        loaded = load_checkpoint(path)
    except UserError as err:
        message = str(err)
        assert "\n" not in message and f"ckpt_path={path}" in message, message
        return
    assert_whole(loaded, path)


def edited_and_read(real: dict, scratch: Path, changes: list[tuple]) -> None:
    checkpoint = copy.deepcopy(real)
    for change in changes:
        mutate(checkpoint, change)
    check_outcome(save(checkpoint, scratch))


@pytest.fixture(scope="module")
def places(real) -> list[tuple]:
    return paths_in(real)


@pytest.mark.slow
@FEW
@given(data=st.data())
def test_structural_edits_are_read_whole_or_refused(real, places, scratch, data):
    changes = data.draw(st.lists(mutations(places), min_size=1, max_size=4))
    edited_and_read(real, scratch, changes)


@FEW
@given(data=st.data())
def test_truncated_or_flipped_bytes_are_refused(trained, scratch, data):
    original = (trained / "last.ckpt").read_bytes()
    damaged = bytearray(original)
    if data.draw(st.booleans(), label="truncate"):
        damaged = damaged[: data.draw(st.integers(0, len(original) - 1), label="at")]
    else:
        for at in data.draw(st.lists(st.integers(0, len(original) - 1), min_size=1, max_size=4)):
            damaged[at] ^= data.draw(st.integers(1, 255), label="mask")
    scratch.write_bytes(bytes(damaged))
    check_outcome(scratch)


# eval.py, as a user runs it ---------------------------------------------------------------------
@pytest.mark.subprocess
def test_eval_refuses_an_edited_checkpoint_in_one_line(real, tmp_path):
    bad = save({**real, "epoch": "abc"}, tmp_path / "edited.ckpt")
    result = run_script("eval.py", f"ckpt_path={bad}", "trainer.accelerator=cpu", cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert lines[-1].startswith(f"error: ckpt_path={bad} is malformed: epoch is 'abc'"), lines[-1]


def test_lightning_restores_the_checkpoint_the_run_checked(trained, real, tmp_path):
    """What the run checked (``start_from``) is what Lightning restores, handed over once:
    the file changed in between is not read; any other read is Lightning's own (a spawned DDP
    process hands its weights back through a temporary file that is no checkpoint of ours)."""
    import pickle

    from multigpu.storage.checkpoint_io import AtomicCheckpointIO

    path = tmp_path / "last.ckpt"
    path.write_bytes((trained / "last.ckpt").read_bytes())
    checked = load_checkpoint(path)
    io = AtomicCheckpointIO()
    io.hand_over(path, checked)
    assert "_checked" not in pickle.loads(pickle.dumps(io)).__dict__  # spawn reads the file
    path.write_bytes(b"\x00 changed after the check")
    assert io.load_checkpoint(str(path)) is checked  # Lightning passes a str or a Path
    with pytest.raises(Exception):  # noqa: B017 - taken once: a second restore reads the file
        io.load_checkpoint(path)
    state = {"weight": torch.ones(2)}  # what a spawned process hands back: a bare state_dict
    io.save_checkpoint(state, tmp_path / ".temp.ckpt")
    assert torch.equal(io.load_checkpoint(tmp_path / ".temp.ckpt")["weight"], torch.ones(2))


@pytest.mark.parametrize(
    "start", ["ckpt_path", "continued", pytest.param("init_from", marks=pytest.mark.slow)]
)
def test_a_run_reads_its_checkpoint_once(trained, data_root, tmp_path, monkeypatch, start):
    """Admission reads and checks the checkpoint a run starts from; the run restores that one,
    without reading the file (its digest and checks) again: one ``torch.load`` of it, whichever
    way the run starts from it (a resume, its own folder continued, another run's weights)."""
    import shutil

    from multigpu.run.training import train

    folder = tmp_path / "run"
    last = folder / "checkpoints" / "last.ckpt"
    overrides = [*TRAINED, f"data.root={data_root}", "trainer.max_epochs=3"]
    if start == "continued":  # a run of one epoch, continued in its folder (the same settings)
        overrides = [*TINY, "data=synthetic", "data.num_train=64", "data.num_test=32"]
        record = train(compose_config(overrides, folder))
        (folder / "metrics.json").write_text(json.dumps({**record, "status": "interrupted"}))
        overrides.append("trainer.max_epochs=2")
    else:
        shutil.copytree(trained.parent, folder)
        overrides.append(f"{start}={last}")
        overrides += ["resume_changes=[model.scheduler.T_max]"] if start == "ckpt_path" else []
    reads, load = [], torch.load
    monkeypatch.setattr(torch, "load", lambda f, *a, **k: reads.append(f) or load(f, *a, **k))
    summary = train(compose_config(overrides, folder if start == "continued" else tmp_path / "new"))
    assert summary["status"] == "completed", summary
    read = [Path(f if isinstance(f, (str, Path)) else f.name) for f in reads]  # or a file
    assert [f for f in read if f.name == "last.ckpt"] == [last]


@pytest.mark.parametrize(
    "content", [b'{"status": "completed"}', b"", b"\x00\x01", "é".encode()], ids=repr
)
def test_a_file_that_is_no_checkpoint_at_all_is_said_so_plainly(content, tmp_path):
    """A metrics.json or any other file passed as ckpt_path: what it is not, in words, not
    pickle's opcode numbers."""
    path = tmp_path / "metrics.json"
    path.write_bytes(content)
    said = refused(path)
    assert "is not a checkpoint (train.py writes a zip archive" in said, said
    assert "operand" not in said
