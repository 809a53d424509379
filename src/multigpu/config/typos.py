"""A misspelt key or group option on the command line, answered in one line with the closest
valid names (difflib's), before torch is imported.

Hydra's answer to ``trainer.max_epoch=3`` is to append it with a ``+`` (hydra#1912), which
Lightning refuses seconds later; to an unknown option, ``~key`` or ``hydra.*`` key, a page. Here
each override is judged against what Hydra offers the command line (``typo_hydra``: the groups,
their options, every key of the config composed from its choices, ``hydra.*`` included), and
``+trainer.<name>`` against Lightning's ``Trainer`` arguments (a constant list: Lightning is not
imported to read it). Syntax and ``+key`` for other nodes are left to Hydra.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from multigpu.config.errors import as_override, closest, did_you_mean, summary_line
from multigpu.config.names import TRAINER_ARGUMENTS
from multigpu.config.typo_hydra import (
    Offer,
    Unreadable,
    UsageError,
    composed_keys,
    composing,
    option_values,
    parse_overrides,
    values,
)

TRAINER = "trainer"  # the config node passed to Trainer(...)
VALUE_OR_MAP = ("model.compile",)  # true or false, or a map of settings
RUNTIME = "hydra.runtime."  # what Hydra records of the job as it starts
OUTPUT_DIR = "paths.output_dir"  # the job's folder, ${hydra:runtime.output_dir}: Hydra makes it
PARAMS = "hydra.sweeper.params"  # a sweeper's search space: Hydra's grammar cannot add to it


@dataclass
class Typo:
    """One override that names nothing: its one-line message and the names it suggests."""

    message: str
    suggestions: list[str] = field(default_factory=list)


def find_typos(
    argv: list[str], config_name: str, conf: Path, judged: list[Composition] | None = None
) -> list[Typo]:
    """The overrides of ``argv`` (Hydra's command line) that name no key or option: a misspelt
    option alone if any (the keys depend on the options, and are judged once these are right).
    The composition they were judged against is added to ``judged``, if given."""
    try:
        overrides = parse_overrides(argv)
    except Unreadable as unreadable:
        return [Typo(str(unreadable))]
    except UsageError:
        return []
    if not overrides:  # none, or Hydra's flags alone: nothing to compose
        return []
    with composing(conf):
        hydra = Composition(config_name, overrides)
        if judged is not None:
            judged.append(hydra)
        options = [o for o in overrides if hydra.is_group(o.key_or_group)]
        for batch in (options, overrides):
            if typos := [typo for override in batch if (typo := hydra.check(override))]:
                return typos
        refused = hydra.refused_value()  # a value Hydra's typed node refuses (n_trials=abc)
    return [Typo(refused)] if refused else []


def hydra_refusal(
    argv: list[str], config_name: str, conf: Path, judged: Composition | None = None
) -> str | None:
    """Hydra's own refusal of a command line whose every name is right, in one line with the
    fix Hydra gives (a group the defaults do not list, overridden without ``+``; a key
    appended with ``+`` that is already there): Hydra would print it as a page and exit 1.
    One composition of the command (about 0.2 s), none where the typo check's (``judged``)
    shows Hydra cannot refuse it; a sweep's overrides are left to each job."""
    try:
        overrides = [o for o in parse_overrides(argv) if not o.is_sweep_override()]
    except UsageError:
        return None
    lines = [o.input_line for o in overrides]
    if not lines or judged is not None and judged.cannot_refuse(overrides):
        return None
    from hydra import compose
    from hydra.errors import ConfigCompositionException
    from omegaconf.errors import ConfigKeyError

    with composing(conf):
        try:
            compose(config_name, lines, return_hydra_config=True)
        except ConfigCompositionException as refused:
            overridden = COULD_NOT_OVERRIDE.match(str(refused))
            if isinstance(refused.__cause__, ConfigKeyError) and overridden:
                return map_refusal(overridden[1], refused.__cause__, overrides, judged)
            if dropped := dropped_unresolved(str(refused), refused.__cause__):
                return dropped
            if refused.__cause__ is not None:  # a value's, which the job may yet resolve
                return None
            return on_the_command_line(" ".join(str(refused).split()))
        except Exception:  # anything else: Hydra says it, with its context, when it runs
            return None
    return None


def dropped_unresolved(refusal: str, cause: BaseException | None) -> str | None:
    """``~key`` where ``key``'s value refers to what Hydra sets only as the job starts
    (``${hydra:runtime.cwd}``, ``${hydra.runtime.output_dir}``): Hydra resolves a key to drop
    it, and refused with its page. A resolver the job registers is left to the job."""
    from omegaconf.errors import InterpolationResolutionError, UnsupportedInterpolationType

    merging = MERGING.match(refusal)
    if not merging or not isinstance(cause, InterpolationResolutionError):
        return None
    if isinstance(cause, UnsupportedInterpolationType):
        return None
    key = merging[1]
    return (
        f"~{key}: Hydra resolves {key} to drop it, and it cannot be resolved before the job "
        f"starts ({summary_line(cause)}); set it instead, {key}=<value>"
    )


def map_refusal(node: str, error: Any, overrides: list[Any], judged: Any) -> str:
    """``node={key: value}`` where ``node``'s map lacks ``key``: a search space is added to
    with ``++`` (Optuna's params); anywhere else the key is likely misspelt: its closest."""
    line = next((o.input_line for o in overrides if o.key_or_group == node), f"{node}={{...}}")
    said = f"{line}: {summary_line(error)} (a map sets only the keys {node} has)"
    if node == PARAMS:
        return f"{said}; to add keys to it, write ++{line}"
    known = judged.keys if judged is not None and judged.config is not None else set()
    close = closest(str(error.full_key), sorted(k for k in known if k.startswith(f"{node}.")))
    return said + (did_you_mean(close) if close else f"; use one of them ({node}.<key>=...)")


MERGING = re.compile(r"Error merging override ~([^\s=]+)")  # a key dropped
COULD_NOT_OVERRIDE = re.compile(r"Could not override '([^']+)'")  # a map given keys it lacks
# Hydra's fix for a group given twice (``+experiment=fast`` where the defaults list it) is the
# defaults list's syntax, ``override experiment: fast``; on the command line it is without +.
DEFAULTS_LIST_FIX = re.compile(r"To override a value use 'override ([\w/.@-]+): ([^']*)'")


def on_the_command_line(refusal: str) -> str:
    return DEFAULTS_LIST_FIX.sub(r"To choose another, write \1=\2 (without +)", refusal)


# What a resolution error says of a value known only once Hydra runs the job: ${hydra:...},
# the project's resolvers, and Hydra's runtime keys (${hydra.runtime.output_dir}).
KNOWN_ONCE_HYDRA_RUNS = ("HydraConfig", "Unsupported interpolation type", "value: hydra.runtime.")


def check_interpolations(argv: list[str], config_name: str, conf: Path) -> str | None:
    """An override's interpolation (``${oc.env:NAME}``, ``${seed}``) that cannot be resolved,
    said now: Hydra prints a traceback for it later, or (one job of a sweep) runs the others.
    Only a command line holding ``${`` pays for the composition this takes."""
    if not any("${" in arg for arg in argv):
        return None
    try:
        overrides = parse_overrides(argv)
    except UsageError:
        return None
    wanted = [(o.key_or_group, v) for o in overrides for v in values(o) if interpolates(v)]
    if not wanted:
        return None
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    with composing(conf):
        cfg = Offer(config_name, overrides).config
    if cfg is None:  # Hydra will say what is wrong with the choices themselves
        return None
    for key, text in wanted:
        try:
            with open_dict(cfg):
                OmegaConf.update(cfg, key, text, force_add=True)
            OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
        except (OmegaConfBaseException, RecursionError, ValueError) as err:
            reason = " ".join(str(err).split("\n")[0].split()) or type(err).__name__
            if not any(later in reason for later in KNOWN_ONCE_HYDRA_RUNS):
                return f"{key}={text} cannot be resolved ({reason}): pass a value it can take"
    return None


def interpolates(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def set_names(override: Any) -> list[str]:
    """The keys an override sets: its own, and those of the map it gives."""
    name, value = override.key_or_group, None if override.is_delete() else override.value()
    return [name, *(f"{name}.{key}" for key in value)] if isinstance(value, dict) else [name]


def is_runtime(override: Any) -> bool:
    return any(f"{name}.".startswith(RUNTIME) for name in set_names(override))


class Composition(Offer):
    """The command line judged against what Hydra offers it (``Offer``): each override's typo.
    Used within ``composing``."""

    def __init__(self, config_name: str, overrides: list[Any]):
        super().__init__(config_name, overrides)
        chosen = {o.key_or_group for o in overrides}  # Optuna's params: a map one may add to
        self.other_sweeper = bool(chosen & {"hparams_search", "hydra/sweeper"})

    def check(self, override: Any) -> Typo | None:
        """The typo in one override, or None (also for what Hydra alone can judge)."""
        name, adding = override.key_or_group, override.is_add() or override.is_force_add()
        said = override.get_key_element()
        if name == PARAMS or name.startswith(f"{PARAMS}."):
            return self.check_params(override)
        if self.sets_what_hydra_sets(override):
            return self.check_runtime(override)
        if override.is_delete() and self.is_declared(name):  # Hydra: its page, exit 1
            return Typo(
                f"{said}: {name} is a setting of Hydra's own config, which can be set but not "
                f"dropped; set it instead, {name}=<value>"
            )
        nested = name.startswith("hydra/") and name.count("/") > 1
        if name == "hydra" or nested and name not in self.listed:
            return None  # Hydra's whole node, or a group an option adds (a sweeper's sampler)
        if self.is_group(name):
            return self.check_option(override)
        if override.is_add() and name in self.keys:  # Hydra: "Could not append", a page
            value = override.get_value_element_as_str()
            return Typo(
                f"{said}={value}: {name} is already in the config, and + only adds a key: "
                f"set it with {name}={value} (or ++{name}={value}, which adds or sets)"
            )
        if adding and in_trainer(name):  # +trainer.<name>: Lightning's Trainer must take it
            argument = name.split(".")[1]
            if argument in TRAINER_ARGUMENTS or override.is_force_add() and name in self.keys:
                return None
            close = [self.trainer_setting(a) for a in closest(argument, TRAINER_ARGUMENTS)]
            return unknown(said, "an argument of Lightning's Trainer", close)
        return None if adding else self.check_key(override)

    def cannot_refuse(self, overrides: list[Any]) -> bool:
        """Whether Hydra composes ``overrides`` as surely as it composed the config they were
        judged against (``surely_composed``, each)."""
        if "config" not in self.__dict__ or self.config is None:  # not composed: unknown
            return False
        return all(self.surely_composed(override) for override in overrides)

    def surely_composed(self, override: Any) -> bool:
        """One plain value (no list, map or interpolation), for an option of a group the
        defaults list or for a leaf key of the composed config (null for any node of the
        project's untyped config); not an add (+, ++), a deletion or a package. A list of
        options (two experiments) or a map Hydra may refuse."""
        from omegaconf import OmegaConf

        name, value = override.key_or_group, override.value()
        if override.is_add() or override.is_force_add() or override.is_delete():
            return False
        if override.package is not None or isinstance(value, (list, dict)) or name == "hydra":
            return False  # hydra=<config>: Hydra's own node, which the typo check leaves alone
        if isinstance(value, str) and "${" in value:
            return False
        if self.is_group(name):
            return name in self.config.hydra.runtime.choices and isinstance(value, str)
        held = OmegaConf.select(
            self.config, name, throw_on_resolution_failure=False
        )  # ${run_name:}
        if value is None and not name.startswith("hydra."):  # the project's nodes are untyped
            return name in self.keys
        return name in self.keys and not OmegaConf.is_config(held)

    def sets_what_hydra_sets(self, override: Any) -> bool:
        """Whether ``override`` sets (by its key, or a key of its map) what Hydra sets as the
        job starts: ``hydra.runtime.*``, and the job's folder where the config takes it from
        Hydra (``paths.output_dir: ${hydra:runtime.output_dir}``; eval.py's is its own)."""
        names = set_names(override)
        return is_runtime(override) or OUTPUT_DIR in names and self.output_dir_is_hydras

    def is_declared(self, key: str) -> bool:
        """Whether ``key`` is a field of a structured node (Hydra's dataclasses), which keeps
        its fields: Hydra refuses to drop one."""
        node, _, name = key.rpartition(".")
        if self.config is None or not node or key not in self.keys:
            return False
        parent = OmegaConf.select(self.config, node, throw_on_resolution_failure=False)
        return OmegaConf.is_dict(parent) and OmegaConf.get_type(parent) not in (dict, None)

    @functools.cached_property
    def output_dir_is_hydras(self) -> bool:
        paths = self.config.get("paths") if self.config is not None else None
        if not OmegaConf.is_config(paths) or "output_dir" not in paths:
            return False
        raw = paths._get_node("output_dir")._value()  # noqa: SLF001 - the text before resolution
        return isinstance(raw, str) and "${hydra:runtime.output_dir}" in raw

    def check_runtime(self, override: Any) -> Typo:
        """``hydra.runtime.*``: what Hydra records of the job as it starts (the options chosen,
        the folders), never set by a command line; a chosen option is set by its group, and the
        job's folder (``paths.output_dir``) by ``hydra.run.dir``, before Hydra makes it."""
        said, group = override.input_line, override.key_or_group.removeprefix(f"{RUNTIME}choices.")
        if not is_runtime(override):
            return Typo(
                f"{said}: {OUTPUT_DIR} is the folder Hydra makes for the job; choose it with "
                "hydra.run.dir=<folder> (a sweep's, hydra.sweep.dir=<folder>)"
            )
        fix = "drop it"
        if override.key_or_group.startswith(f"{RUNTIME}choices.") and self.is_group(group):
            fix = f"choose the option by its group, {group}={as_override(override.value())}"
        return Typo(f"{said}: Hydra sets hydra.runtime.* itself as the job starts; {fix}")

    def check_params(self, override: Any) -> Typo | None:
        """``hydra.sweeper.params``: Hydra 1.3's basic sweeper fails on it with a traceback;
        Optuna's takes the whole map, but reads ``params.<key>`` as nested keys, and fails."""
        said, key = override.input_line, override.key_or_group.removeprefix(f"{PARAMS}.")
        if not self.other_sweeper:
            return Typo(
                f"{said}: the sweeper's params cannot be set on the command line; sweep a key "
                "directly (-m seed=1,2), or set hydra.sweeper.params in an experiment's config file"
            )
        if override.key_or_group == PARAMS:
            return None
        return Typo(
            f"{said}: a searched key is not set through hydra.sweeper.params.<key>; give the key "
            f"itself a range or choices ({key}='interval(0.01,0.1)'), or add an entry: "
            f"'++hydra.sweeper.params={{{key}: \"choice(1,2)\"}}'"
        )

    def is_group(self, name: str) -> bool:
        """Whether Hydra reads ``name=...`` as a group's option (Hydra's own groups too)."""
        return name in self.groups or "/" in name

    def check_option(self, override: Any) -> Typo | None:
        """``group=option`` (``~group``): the group, and its option, must be ones Hydra lists."""
        group, said = override.key_or_group, override.get_key_element()
        if group not in self.listed:
            return unknown(group, "a config group", closest(group, sorted(self.listed)))
        if override.is_delete():
            return None
        options = self.options(group)
        if None in values(override):  # Hydra answers a null option with a traceback
            return Typo(
                f"{said}=null: a config group takes one of its options ({', '.join(options)}); "
                f"to leave it out, drop the override or write ~{group}"
            )
        for value in (v for v in option_values(override) if v not in options):
            listed = f" (options: {', '.join(options)})"
            return unknown(
                f"{said}={value}", f"an option of {group}", closest(value, options), listed
            )
        return None

    def trainer_setting(self, argument: str) -> str:
        """How ``argument`` is set: a key of the config, or one added with a ``+``."""
        key = f"{TRAINER}.{argument}"
        return key if key in self.keys else f"+{key}"

    def check_key(self, override: Any) -> Typo | None:
        """``key=value`` or ``~key``: the key must be one of the composed config, ``hydra.*``
        included (unless Hydra cannot compose the choices: it will say why)."""
        key, deleting = override.key_or_group, override.is_delete()
        if self.config is None:
            return None
        if dropped := self.dropped_by(override):
            return Typo(f"{key} is not a setting: {dropped} drops it; give one or the other")
        if key in self.keys:
            return None
        trainer = in_trainer(key) and not deleting  # a delete's name is a key: no + to offer
        if trainer and key.split(".", 1)[1] in TRAINER_ARGUMENTS:
            added = f"+{key}={override.get_value_string()}"
            return Typo(f"{key} is not a setting yet: add it with {added}", [f"+{key}"])
        if unlocked := self.options_giving(key):
            return Typo(f"{key} is not a setting {unlocked}")
        if held := self.map_instead(override):
            return Typo(f"{key} is not a setting: {held}")
        names = self.keys | self.groups
        names |= {self.trainer_setting(a) for a in TRAINER_ARGUMENTS} if trainer else set()
        close = closest(
            key, sorted(n for n in names if not key.startswith(f"{n.replace('/', '.')}."))
        )
        if not looks_private(key):  # Hydra's own keys (_target_) only for typos of them
            close = [c for c in close if not looks_private(c)]
        listing = "hydra" if key.startswith("hydra.") else "job"
        hint = f" (python {script_name()} --cfg {listing} lists them)" if not close else ""
        if trainer and not any(c.startswith("+") for c in close):
            hint = f" (a new Trainer argument is added with +{TRAINER}.<name>)"
        return unknown(key, "a setting", close, hint)

    def map_instead(self, override: Any) -> str:
        """``model.compile.mode=default`` where ``model.compile`` holds true or false: it takes
        a map of torch.compile's arguments instead, written so; or ""."""
        from omegaconf import OmegaConf

        node, _, rest = override.key_or_group.rpartition(".")
        if node not in VALUE_OR_MAP or override.is_delete():
            return ""
        given = [o.value() for o in self.overrides if o.key_or_group == node]  # the last counts
        held = given[-1] if given else OmegaConf.select(self.config, node)
        if isinstance(held, dict) or OmegaConf.is_config(held):
            return ""
        held, value = as_override(held), override.get_value_string()
        return f"{node}={held} holds no keys; give them as a map, e.g. {node}={{{rest}:{value}}}"

    def dropped_by(self, override: Any) -> str:
        """The ``~node`` that drops ``override``'s key or a node above it, or "": a group's
        (``~data``) anywhere on the line, where the composed config lacks the key (Hydra leaves
        the group's option out before it sets any value), else a key's (``~seed``,
        ``~trainer.max_epochs``) before it (Hydra sets them in order)."""
        key = f"{override.key_or_group}."
        at = next((i for i, o in enumerate(self.overrides) if o is override), len(self.overrides))
        for i, drop in enumerate(self.overrides):
            node = drop.key_or_group
            if not drop.is_delete() or not key.startswith(f"{node.replace('/', '.')}."):
                continue
            if override.key_or_group not in self.keys if self.is_group(node) else i < at:
                return drop.input_line
        return ""

    def options_giving(self, key: str) -> str:
        """How to get ``key`` under an empty group (``model.scheduler.T_max`` while
        ``model.scheduler`` is null): the options that give it (each composed), or ""."""
        from omegaconf import OmegaConf

        parts = key.split(".")
        for node in (".".join(parts[:length]) for length in range(len(parts) - 1, 0, -1)):
            group = node.replace(".", "/")
            if group in self.groups and OmegaConf.select(self.config, node, default=0) is None:
                plus = "" if group in self.config.hydra.runtime.choices else "+"
                choices = [f"{plus}{group}={option}" for option in self.options(group)]
                giving = [c for c in choices if key in composed_keys(self.compose([c]))]
                return f"until {node} is chosen: add {' or '.join(giving)}" if giving else ""
        return ""


def looks_private(key: str) -> bool:
    """``_target_``, or one edit from it (``target_``, ``data_target_``): the last name
    starts or ends with an underscore."""
    last = key.rpartition(".")[2]
    return last.startswith("_") or last.endswith("_")


def in_trainer(key: str) -> bool:
    return key.startswith(f"{TRAINER}.")


def unknown(said: str, what: str, close: list[str], hint: str = "") -> Typo:
    """The one message every misspelt name gets: what it is not, and the names it may mean."""
    return Typo(f"{said} is not {what}{did_you_mean(close)}{hint}", close)


def script_name() -> str:
    return Path(sys.argv[0]).name or "train.py"
