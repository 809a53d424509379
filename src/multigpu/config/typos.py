"""A misspelt key or group option on the command line, answered in one line with the closest
valid names (difflib's), before Hydra composes anything and before torch is imported.

Hydra's own answer to ``trainer.max_epoch=3`` is to append the typo with a ``+`` (hydra#1912),
which Lightning refuses seconds later; an unknown option is listed under a screen of
search-path lines. Here each override is checked against the conf tree first: a group's option
against the group's YAML files, a key against the keys of the config this command line composes
(read from the YAML of the options the defaults lists and the command line choose: a few
milliseconds, where Hydra's composition takes most of a second), ``+trainer.<name>`` against
Lightning's ``Trainer`` arguments (a constant list: Lightning is not imported to read it).
What the YAML cannot tell for sure (a defaults list this module does not follow) is composed by
Hydra; what Hydra alone can judge (syntax, ``+key`` for other nodes, ``~key``, ``hydra.*``) is
left to it.
"""

from __future__ import annotations

import functools
import os
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
    else return at once, having written and imported nothing heavy."""
    typos = find_typos(sys.argv[1:], config_name, conf_dir())
    if typos:
        print(f"error: {'; '.join(t.message for t in typos)}", file=sys.stderr, flush=True)
        sys.exit(2)
    if unresolved := check_interpolations(sys.argv[1:], config_name, conf_dir()):
        print(f"error: {unresolved}", file=sys.stderr, flush=True)
        sys.exit(2)


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
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    tree = ConfTree(conf, config_name, overrides)
    chosen = [line for o in overrides if (line := tree.composable(o))]
    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose(config_name, overrides=chosen, return_hydra_config=True)
    except Exception:  # Hydra will say what is wrong with the choices themselves
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


def find_typos(argv: list[str], config_name: str, conf: Path) -> list[Typo]:
    """The overrides of ``argv`` (Hydra's command line) that name no key or option."""
    if not argv:
        return []
    try:
        overrides = parse_overrides(argv)
    except UsageError:
        return []
    tree = ConfTree(conf, config_name, overrides)
    options = [o for o in overrides if tree.is_group(o.key_or_group)]
    if typos := [typo for override in options if (typo := tree.check(override))]:
        return typos  # the keys depend on the options: they are judged once these are right
    return [typo for override in overrides if (typo := tree.check(override))]


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


class ConfTree:
    """What the conf tree offers one primary config and command line: its groups, their
    options, the keys of the config it composes (each read only when asked)."""

    def __init__(self, conf: Path, config_name: str, overrides: list[Any]):
        self.conf = conf
        self.config_name = config_name
        self.overrides = overrides
        self.other_sweeper = any(  # Optuna's params are a map the command line may add to
            o.key_or_group in ("hparams_search", "hydra/sweeper") for o in overrides
        )

    def check(self, override: Any) -> Typo | None:
        """The typo in one override, or None (also for what Hydra alone can judge)."""
        name = override.key_or_group
        swept = name == "hydra.sweeper.params" or name.startswith("hydra.sweeper.params.")
        if swept and not self.other_sweeper:
            return Typo(  # Hydra 1.3's basic sweeper fails on these with a traceback
                f"{override.input_line}: the sweeper's params cannot be set on the command "
                "line; sweep a key directly (-m seed=1,2), or set hydra.sweeper.params in an "
                "experiment's config file",
                [],
            )
        if override.is_delete() or name == "hydra" or name.startswith(("hydra.", "hydra/")):
            return None
        if self.is_group(name):
            return self.check_option(override)
        if override.is_add() or override.is_force_add():
            return self.check_trainer_argument(override) if in_trainer(name) else None
        return self.check_key(override)

    def is_group(self, name: str) -> bool:
        """Whether Hydra reads ``name=...`` as a group's option (Hydra's own groups too)."""
        return name in self.groups or "/" in name

    def check_option(self, override: Any) -> Typo | None:
        """``group=option``: the option must be one of the group's YAML files."""
        group = override.key_or_group
        if group not in self.groups:
            close = closest(group, sorted(self.groups))
            return Typo(f"{group} is not a config group{did_you_mean(close)}", close)
        options = self.options(group)
        values = override.value()
        values = getattr(values, "list", [values]) if override.is_sweep_override() else [values]
        if None in values:  # Hydra answers a null option with a traceback
            listed = ", ".join(sorted(options))
            return Typo(
                f"{override.get_key_element()}=null: a config group takes one of its options "
                f"({listed}); to leave it out, drop the override or write ~{group}",
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
        """``key=value``: the key must be one the config has (no option has it: then the config
        is composed, to be sure and to suggest from the keys this run has)."""
        key = override.key_or_group
        if key in self.keys or key in self.composed_keys:  # composed only when unsure
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
        while ``model.scheduler`` is null): the options that give it, or ""."""
        parts = key.split(".")
        for length in range(len(parts) - 1, 0, -1):
            node = ".".join(parts[:length])
            group = node.replace(".", "/")
            if group in self.groups and node in self.composed_keys:
                options = self.options(group)
                giving = [o for o in options if key in self.option_keys(group, o)]
                plus = "" if group in self.chosen.choices else "+"
                said = " or ".join(f"{plus}{group}={o}" for o in giving)
                return f"until {node} is chosen: add {said}" if giving else ""
        return ""

    def option_keys(self, group: str, option: str) -> list[str]:
        path = self.conf / group / f"{option}.yaml"
        return file_keys(read_yaml(path), package_of(path, group))

    def candidates(self, key: str) -> list[str]:
        """The names a misspelt ``key`` may have meant: the composed config's keys, the groups,
        and for ``trainer.*`` the Trainer's other arguments (added with a ``+``)."""
        names = sorted(self.composed_keys | self.groups)
        if in_trainer(key):
            names += [self.trainer_setting(a) for a in TRAINER_ARGUMENTS]
        return sorted(set(names))

    @functools.cached_property
    def groups(self) -> set[str]:
        """Every config group under conf/ (``model/scheduler`` included), Hydra's own aside."""
        found = set()
        for folder, _, files in os.walk(self.conf):
            group = Path(folder).relative_to(self.conf).as_posix()
            if group != "." and group.split("/")[0] != "hydra" and any(map(is_yaml, files)):
                found.add(group)
        return found

    def options(self, group: str) -> list[str]:
        return sorted(p.stem for p in (self.conf / group).iterdir() if is_yaml(p.name))

    @functools.cached_property
    def keys(self) -> set[str]:
        """The keys of the config Hydra will compose, read from the YAML of the primary config
        and of the option chosen in each group (tests/test_typos.py compares them with Hydra's
        composition)."""
        keys: set[str] = set()
        for path, group in self.chosen_files():
            content = read_yaml(path)
            package = package_of(path, group) if group else ""
            # A node a later file sets to a value (``callbacks.test_figures: null``) loses
            # the keys an earlier file gave below it.
            for leaf in leaf_keys(content, package):
                keys = {key for key in keys if not key.startswith(f"{leaf}.")}
            keys.update(file_keys(content, package))
        return keys

    def chosen_files(self) -> list[tuple[Path, str]]:
        """(file, its group) of every config composed: the primary, then each group's option
        as the defaults lists choose it (``override`` included), the command line last."""
        return [(self.conf / f"{self.config_name}.yaml", ""), *self.chosen.files()]

    @functools.cached_property
    def chosen(self) -> Choices:
        chosen = Choices(self.conf, self.command_line_choices())
        chosen.follow(self.conf / f"{self.config_name}.yaml", "")
        chosen.choices.update(chosen.fixed)
        while pending := chosen.pending():
            for path, group in pending:
                chosen.follow(path, group)
        return chosen

    def command_line_choices(self) -> dict[str, list[str]]:
        """The options the command line picks, per group (none for ``~group`` or null); one
        that is no option is reported on its own and leaves the group as it was."""
        picked: dict[str, list[str]] = {}
        for override in self.overrides:
            group = override.key_or_group
            if group not in self.groups:
                continue
            if override.is_delete() or override.value() is None:
                picked[group] = []
            elif valid := [v for v in option_values(override) if v in self.options(group)]:
                picked[group] = valid
        return picked

    @functools.cached_property
    def composed_keys(self) -> set[str]:
        """The keys of the config Hydra composes with the command line's valid options: the
        YAML's, unless the defaults lists hold what ``Choices`` does not follow; then (or if
        composing fails) Hydra composes it, which takes a second."""
        if not self.chosen.unsure:
            return self.keys
        from hydra import compose, initialize_config_dir
        from omegaconf import OmegaConf

        chosen = [line for o in self.overrides if (line := self.composable(o))]
        try:
            with initialize_config_dir(config_dir=str(self.conf), version_base="1.3"):
                cfg = compose(self.config_name, overrides=chosen)
        except Exception:  # any failure: the YAML's keys will do
            return self.keys
        return set(dotted_keys(OmegaConf.to_container(cfg, resolve=False), ""))

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


def is_yaml(name: str) -> bool:
    return name.endswith(".yaml")


@functools.cache
def read_yaml(path: Path) -> dict:
    """A config file as plain data (libyaml's parser when there is one: fast)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as file:
        content = yaml.load(file, Loader=loader)  # a safe loader
    return content if isinstance(content, dict) else {}


def package_of(path: Path, group: str) -> str:
    """Where an option's keys land: its ``# @package`` header, else its group's path."""
    with open(path, encoding="utf-8") as file:
        for line in file:
            if line.strip() and not line.startswith("#"):
                break
            if line.startswith("# @package"):
                package = line.split(maxsplit=2)[2].strip()
                package = package.replace("_global_", "").replace("_group_", group)
                return package.replace("/", ".").strip(".")
    return group.replace("/", ".")


class Choices:
    """Hydra's defaults lists, followed as far as keys go: which option of each group, and
    which other configs, make up the composed config."""

    def __init__(self, conf: Path, fixed: dict[str, list[str]]):
        self.conf = conf
        self.fixed = fixed  # the command line's: no defaults list changes them
        self.choices: dict[str, list[str]] = {}
        self.included: list[tuple[Path, str]] = []  # configs named without a group
        self.followed: set[Path] = set()
        self.unsure = False  # something Hydra composes that is not followed here

    def doubt(self) -> None:
        self.unsure = True

    def follow(self, path: Path, group: str) -> None:
        """Take in the defaults list of ``path``, a config of ``group`` ("" for conf/)."""
        self.followed.add(path)
        for entry in read_yaml(path).get("defaults") or []:
            if isinstance(entry, str) and entry != "_self_":
                self.include(self.conf / group / f"{entry}.yaml", group)
            elif isinstance(entry, dict):
                for name, option in entry.items():
                    self.choose(name, option, group)
            elif entry != "_self_":
                self.doubt()

    def include(self, path: Path, group: str) -> None:
        if not path.is_file() or "$" in path.name:
            self.doubt()
        elif path not in self.followed:
            self.included.append((path, group))
            self.follow(path, group)

    def choose(self, name: str, option: Any, group: str) -> None:
        """One ``group: option`` entry; ``override`` replaces an earlier choice."""
        words = name.split()
        target = words[-1]
        target = target.strip("/") if target.startswith("/") else f"{group}/{target}".strip("/")
        if target == "hydra" or target.startswith("hydra/") or target in self.fixed:
            return
        if "@" in target or not (option is None or isinstance(option, str)) or "$" in str(option):
            self.doubt()  # a package of its own, several options, an interpolation
        elif words[0] == "override" or target not in self.choices:
            if target in self.choices and self.followed_defaults(target):
                self.doubt()  # the replaced option's own defaults list was taken in
            self.choices[target] = [option] if option else []

    def followed_defaults(self, group: str) -> bool:
        files = [self.conf / group / f"{option}.yaml" for option in self.choices[group]]
        return any(p in self.followed and read_yaml(p).get("defaults") for p in files)

    def pending(self) -> list[tuple[Path, str]]:
        return [(p, g) for p, g in self.files() if p not in self.followed]

    def files(self) -> list[tuple[Path, str]]:
        chosen = [
            (self.conf / group / f"{option}.yaml", group)
            for group, options in self.choices.items()
            for option in options
        ]
        if not all(p.is_file() for p, _ in chosen):
            self.doubt()
        return [(p, g) for p, g in chosen if p.is_file()] + self.included


def file_keys(content: dict, package: str) -> list[str]:
    """The dotted keys a config file gives at ``package``: its defaults list and Hydra's own
    settings aside."""
    own = {k: v for k, v in content.items() if k != "defaults" and (package or k != "hydra")}
    parts = package.split(".") if package else []
    nodes = [".".join(parts[: i + 1]) for i in range(len(parts))]  # model, model.scheduler
    return nodes + dotted_keys(own, package)


def leaf_keys(content: dict, package: str) -> list[str]:
    """The keys a config file sets to a value that is not a mapping (null, a number, ...)."""
    own = {k: v for k, v in content.items() if k != "defaults" and (package or k != "hydra")}
    found = []

    def walk(node: dict, prefix: str) -> None:
        for name, value in node.items():
            key = f"{prefix}.{name}" if prefix else str(name)
            if isinstance(value, dict):
                walk(value, key)
            else:
                found.append(key)

    walk(own, package)
    return found


def dotted_keys(node: dict, prefix: str) -> list[str]:
    """Every key of a mapping, nested ones dotted (``model.optimizer.lr``)."""
    keys = []
    for name, value in node.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        keys.append(key)
        if isinstance(value, dict):
            keys += dotted_keys(value, key)
    return keys
