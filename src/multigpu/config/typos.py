"""A misspelt key or group option on the command line, answered in one line with the closest
valid names (difflib's), before torch is imported.

Hydra's own answer to ``trainer.max_epoch=3`` is to append the typo with a ``+`` (hydra#1912),
which Lightning refuses seconds later; an unknown option is listed under a screen of
search-path lines. Here Hydra itself says what is valid: its config repository lists the
groups and their options, and the config it composes from the command line's group choices
(the key overrides aside) holds every key an override may set; ``+trainer.<name>`` is checked
against Lightning's ``Trainer`` arguments (a constant list: Lightning is not imported to read
it). What Hydra alone can judge (syntax, ``+key`` for other nodes, ``~key``, ``hydra.*``) is
left to it; a choice of Hydra's own groups (``hydra/launcher=...``) is checked against
its listing too.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multigpu.config.names import TRAINER_ARGUMENTS

TRAINER = "trainer"  # the config node passed to Trainer(...)

# Options that make Hydra load another config (or none): the check then stands aside.
OTHER_CONFIG = ("config_name", "config_path", "config_dir", "experimental_rerun")
OTHER_ACTION = ("shell_completion", "info")

MAX_SUGGESTIONS = 3
CUTOFF = 0.6  # difflib's default: below it a name is not offered
WITHIN = 0.1  # only names about as close as the closest one are offered


@dataclass
class Typo:
    """One override that names nothing: its one-line message and the names it suggests."""

    message: str
    suggestions: list[str] = field(default_factory=list)


class UsageError(Exception):
    """The command line is not for this check (a parse error, another config): Hydra answers."""


def check_command_line(config_name: str) -> None:
    """Exit 2 with one ``error:`` line if an override of ``sys.argv`` names no key or option;
    else return, having written and imported nothing heavy."""
    typos = find_typos(sys.argv[1:], config_name, conf_dir())
    if typos:
        print(f"error: {'; '.join(t.message for t in typos)}", file=sys.stderr, flush=True)
        sys.exit(2)
    if unresolved := check_interpolations(sys.argv[1:], config_name, conf_dir()):
        print(f"error: {unresolved}", file=sys.stderr, flush=True)
        sys.exit(2)


def find_typos(argv: list[str], config_name: str, conf: Path) -> list[Typo]:
    """The overrides of ``argv`` (Hydra's command line) that name no key or option."""
    try:
        overrides = parse_overrides(argv)
    except UsageError:
        return []
    if not overrides:  # none, or Hydra's flags alone
        return []
    with composing(conf):
        hydra = Composition(config_name, overrides)
        options = [o for o in overrides if hydra.is_group(o.key_or_group)]
        if typos := [typo for override in options if (typo := hydra.check(override))]:
            return typos  # the keys depend on the options: they are judged once these are right
        return [typo for override in overrides if (typo := hydra.check(override))]


def check_interpolations(argv: list[str], config_name: str, conf: Path) -> str | None:
    """An override whose value is an interpolation (``${oc.env:NAME}``, ``${seed}``) that
    cannot be resolved, said in one line now: later Hydra prints a page of traceback for it,
    or (one job of a sweep) runs the others. Only a command line holding ``${`` pays for the
    composition this takes."""
    if not any("${" in arg for arg in argv):
        return None
    try:
        overrides = parse_overrides(argv)
    except UsageError:
        return None
    wanted = [(o.key_or_group, v) for o in overrides for v in interpolated(o)]
    if not wanted:
        return None
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    with composing(conf):
        cfg = Composition(config_name, overrides).config
    if cfg is None:  # Hydra will say what is wrong with the choices themselves
        return None
    for key, text in wanted:
        try:
            with open_dict(cfg):
                OmegaConf.update(cfg, key, text, force_add=True)
            OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
        except (OmegaConfBaseException, RecursionError, ValueError) as err:
            reason = " ".join(str(err).split("\n")[0].split()) or type(err).__name__
            if "HydraConfig" in reason or "Unsupported interpolation type" in reason:
                continue  # ${hydra:...} and the project's resolvers: known once Hydra runs
            return f"{key}={text} cannot be resolved ({reason}): pass a value it can take"
    return None


def interpolated(override: Any) -> list[str]:
    """The values of ``override`` (each of a sweep's) that are interpolations."""
    value = override.value()
    values = getattr(value, "list", None)  # a sweep's choices
    return [v for v in ([value] if values is None else values) if isinstance(v, str) and "${" in v]


def conf_dir() -> Path:
    """``conf/`` beside the running script, where ``@hydra.main(config_path="conf")`` reads."""
    script = getattr(sys.modules.get("__main__"), "__file__", None) or sys.argv[0]
    beside = Path(script).resolve().parent / "conf"
    return beside if beside.is_dir() else Path(__file__).resolve().parents[3] / "conf"


def composing(conf: Path) -> Any:
    """Hydra initialised on ``conf`` as ``@hydra.main`` will be (a context: it is undone)."""
    from hydra import initialize_config_dir

    return initialize_config_dir(config_dir=str(conf.resolve()), version_base="1.3")


def parse_overrides(argv: list[str]) -> list[Any]:
    """Hydra's overrides in ``argv`` (its own flags set aside), parsed as Hydra parses them."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if "--version" in argv:  # argparse would print it and exit
        raise UsageError("--version")
    parser = get_args_parser()
    parser.error = raise_usage_error  # type: ignore[method-assign]
    args, _ = parser.parse_known_args(argv)
    if any(getattr(args, name, None) for name in (*OTHER_CONFIG, *OTHER_ACTION)):
        raise UsageError("another config or action")
    try:
        return OverridesParser.create().parse_overrides(args.overrides)
    except HydraException as err:
        raise UsageError(str(err)) from err


def raise_usage_error(message: str) -> None:
    raise UsageError(message)


class Composition:
    """What Hydra offers one primary config and command line: its groups and their options
    (its repository's listing), and the config it composes from the command line's group
    choices (composed only when a key is to be judged). Used within ``composing``."""

    def __init__(self, config_name: str, overrides: list[Any]):
        from hydra.core.global_hydra import GlobalHydra

        # Hydra's config repository: its ConfigLoader's listing copies it on every call
        self.repository = GlobalHydra.instance().config_loader().repository
        self.config_name = config_name
        self.overrides = overrides
        self.other_sweeper = any(  # Optuna's params are a map the command line may add to
            o.key_or_group in ("hparams_search", "hydra/sweeper") for o in overrides
        )

    def check(self, override: Any) -> Typo | None:
        """The typo in one override, or None (also for what Hydra alone can judge)."""
        name = override.key_or_group
        swept = name == "hydra.sweeper.params" or name.startswith("hydra.sweeper.params.")
        if swept and self.other_sweeper and name != "hydra.sweeper.params":
            key = name.removeprefix("hydra.sweeper.params.")
            return Typo(  # a searched key holds dots: Hydra reads this as nested keys, and fails
                f"{override.input_line}: a searched key is not set through "
                f"hydra.sweeper.params.<key>; give the key itself a range or choices "
                f"({key}='interval(0.01,0.1)'), or add an entry: "
                f"'hydra.sweeper.params={{{key}: \"choice(1,2)\"}}'",
                [],
            )
        if swept and not self.other_sweeper:
            return Typo(  # Hydra 1.3's basic sweeper fails on these with a traceback
                f"{override.input_line}: the sweeper's params cannot be set on the command "
                "line; sweep a key directly (-m seed=1,2), or set hydra.sweeper.params in an "
                "experiment's config file",
                [],
            )
        if override.is_delete() or name == "hydra" or name.startswith("hydra."):
            return None
        if name.startswith("hydra/") and name.count("/") > 1 and name not in self.hydra_groups:
            return None  # under a group whose option adds it (a sweeper's sampler): Hydra judges
        if self.is_group(name):
            return self.check_option(override)
        if override.is_add() or override.is_force_add():
            return self.check_trainer_argument(override) if in_trainer(name) else None
        return self.check_key(override)

    def is_group(self, name: str) -> bool:
        """Whether Hydra reads ``name=...`` as a group's option (Hydra's own groups too)."""
        return name in self.groups or "/" in name

    def check_option(self, override: Any) -> Typo | None:
        """``group=option``: the option must be one Hydra's repository lists for the group."""
        group = override.key_or_group
        if group not in self.groups | self.hydra_groups:
            close = closest(group, sorted(self.groups | self.hydra_groups))
            return Typo(f"{group} is not a config group{did_you_mean(close)}", close)
        options = self.options(group)
        values = override.value()
        values = getattr(values, "list", [values]) if override.is_sweep_override() else [values]
        if None in values:  # Hydra answers a null option with a traceback
            return Typo(
                f"{override.get_key_element()}=null: a config group takes one of its options "
                f"({', '.join(options)}); to leave it out, drop the override or write ~{group}",
                [],
            )
        for value in option_values(override):
            if value not in options:
                close = closest(value, options)
                said = f"{override.get_key_element()}={value}"
                listed = "options: " + ", ".join(options)
                return Typo(
                    f"{said} is not an option of {group}{did_you_mean(close)} ({listed})", close
                )
        return None

    def check_trainer_argument(self, override: Any) -> Typo | None:
        """``+trainer.<name>``: Lightning's ``Trainer`` must take ``name``."""
        argument = override.key_or_group.split(".")[1]
        if argument in TRAINER_ARGUMENTS:
            return None
        if override.is_force_add() and override.key_or_group in self.keys:
            return None
        close = [self.trainer_setting(a) for a in closest(argument, TRAINER_ARGUMENTS)]
        said = f"{override.get_key_element()} is not an argument of Lightning's Trainer"
        return Typo(f"{said}{did_you_mean(close)}", close)

    def trainer_setting(self, argument: str) -> str:
        """How ``argument`` is set: a key of the config, or one added with a ``+``."""
        key = f"{TRAINER}.{argument}"
        return key if key in self.keys else f"+{key}"

    def check_key(self, override: Any) -> Typo | None:
        """``key=value``: the key must be one of the composed config (none when Hydra cannot
        compose the choices: it will say why)."""
        key = override.key_or_group
        if self.config is None or key in self.keys:
            return None
        parts = key.split(".")
        if len(parts) == 2 and parts[0] == TRAINER and parts[1] in TRAINER_ARGUMENTS:
            value = override.input_line.split("=", 1)[1] if override.input_line else "..."
            return Typo(f"{key} is not a setting yet: add it with +{key}={value}", [f"+{key}"])
        if unlocked := self.options_giving(key):
            return Typo(f"{key} is not a setting {unlocked}", [])
        close = closest(key, [c for c in self.candidates(key) if not is_above(c, key)])
        if not looks_private(key):  # Hydra's own keys (_target_) only for typos of them
            close = [c for c in close if not looks_private(c)]
        hint = f" (python {script_name()} --cfg job lists them)" if not close else ""
        if in_trainer(key) and not any(c.startswith("+") for c in close):
            hint = f" (a new Trainer argument is added with +{TRAINER}.<name>)"
        return Typo(f"{key} is not a setting{did_you_mean(close)}{hint}", close)

    def options_giving(self, key: str) -> str:
        """How to get ``key`` when it lies under an empty group (``model.scheduler.T_max``
        while ``model.scheduler`` is null): the options that give it (Hydra composes each), or
        ""."""
        from omegaconf import OmegaConf

        parts = key.split(".")
        for length in range(len(parts) - 1, 0, -1):
            node = ".".join(parts[:length])
            group = node.replace(".", "/")
            empty = OmegaConf.select(self.config, node, default=0) is None  # there, and null
            if group in self.groups and empty:
                plus = "" if group in self.config.hydra.runtime.choices else "+"
                choices = [f"{plus}{group}={option}" for option in self.options(group)]
                giving = [c for c in choices if key in composed_keys(self.compose([c]))]
                return f"until {node} is chosen: add {' or '.join(giving)}" if giving else ""
        return ""

    def candidates(self, key: str) -> list[str]:
        """The names a misspelt ``key`` may have meant: the composed config's keys, the groups,
        and for ``trainer.*`` the Trainer's other arguments (added with a ``+``)."""
        names = self.keys | self.groups
        if in_trainer(key):
            names |= {self.trainer_setting(a) for a in TRAINER_ARGUMENTS}
        return sorted(names)

    @functools.cached_property
    def groups(self) -> set[str]:
        """Every config group (``model/scheduler`` included), Hydra's own aside."""
        found: set[str] = set()
        pending = [g for g in self.options("", "GROUP") if g != "hydra"]
        while pending:
            group = pending.pop()
            found.add(group)
            pending += [f"{group}/{child}" for child in self.options(group, "GROUP")]
        return found

    @functools.cached_property
    def hydra_groups(self) -> set[str]:
        """Hydra's own groups (``hydra/launcher``, ``hydra/sweeper/sampler``), plugins' included."""
        found: set[str] = set()
        pending = [f"hydra/{g}" for g in self.options("hydra", "GROUP")]
        while pending:
            group = pending.pop()
            found.add(group)
            pending += [f"{group}/{child}" for child in self.options(group, "GROUP")]
        return found

    def options(self, group: str, kind: str = "CONFIG") -> list[str]:
        """The options (``GROUP``: the groups) Hydra's repository lists in ``group``."""
        from hydra.core.object_type import ObjectType

        return sorted(self.repository.get_group_options(group, ObjectType[kind]))

    @functools.cached_property
    def config(self) -> Any:
        """The config Hydra composes from the command line's group choices (a sweep's first
        option), ``hydra`` node included; None where Hydra cannot compose them."""
        return self.compose([])

    @functools.cached_property
    def keys(self) -> set[str]:
        """Every dotted key of ``config``, Hydra's own aside."""
        return composed_keys(self.config)

    def compose(self, more: list[str]) -> Any:
        """Hydra's composition of the command line's choices and ``more``, or None."""
        from hydra import compose

        chosen = [line for o in self.overrides if (line := self.composable(o))]
        try:
            return compose(self.config_name, [*chosen, *more], return_hydra_config=True)
        except Exception:  # Hydra will say what is wrong with the choices themselves
            return None

    def composable(self, override: Any) -> str | None:
        """A group's choice as composition can take it: a valid option (a sweep's first), or
        a deletion; None for anything else."""
        if override.key_or_group not in self.groups:
            return None
        if override.is_delete():
            return override.input_line
        options = option_values(override)
        if not options or self.check_option(override):
            return None
        return f"{override.get_key_element()}={options[0]}"


def composed_keys(cfg: Any) -> set[str]:
    """Every dotted key of a composed config, Hydra's own aside (none for no config)."""
    if cfg is None:
        return set()
    from omegaconf import OmegaConf

    content = OmegaConf.to_container(cfg, resolve=False)
    content.pop("hydra", None)
    return set(dotted_keys(content, ""))


def dotted_keys(node: dict, prefix: str) -> list[str]:
    """Every key of a mapping, nested ones dotted (``model.optimizer.lr``)."""
    keys = []
    for name, value in node.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        keys.append(key)
        if isinstance(value, dict):
            keys += dotted_keys(value, key)
    return keys


def is_above(name: str, key: str) -> bool:
    """``model.optimizer`` is above ``model.optimizer.lrr``: not what a typo of it meant."""
    return key.startswith(f"{name.replace('/', '.')}.")


def looks_private(key: str) -> bool:
    """``_target_``, or one edit from it (``target_``, ``data_target_``): the last name
    starts or ends with an underscore."""
    last = key.rpartition(".")[2]
    return last.startswith("_") or last.endswith("_")


def in_trainer(key: str) -> bool:
    return key.startswith(f"{TRAINER}.")


def option_values(override: Any) -> list[str]:
    """The options an override names (a sweep's each), those a check can read (no glob)."""
    if override.is_sweep_override():
        sweep = override.value()
        return [v for v in getattr(sweep, "list", []) if isinstance(v, str)]
    value = override.value()
    return [value] if isinstance(value, str) and "$" not in value else []


def closest(word: str, candidates: Any) -> list[str]:
    """difflib's close matches, at most three, and only those about as close as the best."""
    import difflib

    scored = []
    for candidate in candidates:
        matcher = difflib.SequenceMatcher(None, word, candidate)
        if matcher.real_quick_ratio() >= CUTOFF and matcher.quick_ratio() >= CUTOFF:
            scored.append((matcher.ratio(), candidate))
    scored = sorted((s for s in scored if s[0] >= CUTOFF), key=lambda s: (-s[0], s[1]))
    return [c for r, c in scored[:MAX_SUGGESTIONS] if r >= scored[0][0] - WITHIN]


def did_you_mean(names: list[str]) -> str:
    if not names:
        return ""
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return f": did you mean {listed}?"


def script_name() -> str:
    return Path(sys.argv[0]).name or "train.py"
