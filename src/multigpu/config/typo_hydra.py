"""What Hydra offers one command line, with nothing judged yet: its overrides, parsed as Hydra
parses them; its config groups and their options, as Hydra's config sources list them (its own
and plugins' included); the config it composes from the command line's group choices, with
every key of it; and the value its own typed node refuses as Hydra sets the overrides (an
integer key given ``abc``). ``multigpu.config.typos`` judges the command line against these.
"""

from __future__ import annotations

import copy
import functools
import os
import sys
from pathlib import Path
from typing import Any

from multigpu.config.errors import as_override, either, summary_line

# Hydra's flags that load another config (or none), or do something else: the check stands aside.
STAND_ASIDE = (
    *("config_name", "config_path", "config_dir", "experimental_rerun"),
    *("shell_completion", "info"),
)


# The lines of Hydra's parse error around its reason.
HYDRA_FRAME = ("Error parsing override", "See https://hydra.cc")


class UsageError(Exception):
    """The command line is not for this check (another config, an action): Hydra answers."""


class Unreadable(UsageError):
    """An override Hydra's grammar cannot read (``key=~/x``, ``seed=1)``): said in one line."""


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
    from hydra._internal.utils import get_args_parser  # the flags @hydra.main reads
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = get_args_parser()
    parser.error = raise_usage_error  # type: ignore[method-assign]
    args, unread = parser.parse_known_args([a for a in argv if a != "--version"])  # it'd exit
    helped = "--version" in argv or args.help or args.hydra_help  # Hydra answers these first
    if unread and not helped:  # Hydra's own parse: its usage page, "unrecognized arguments"
        raise Unreadable(unread_argument(argv, unread))
    modes = [flag for flag, dest in MODES.items() if getattr(args, dest, None) not in (None, False)]
    if len(modes) > 1 and not helped:  # Hydra: a ValueError's traceback
        raise Unreadable(
            f"{' and '.join(modes)} given together: Hydra does one of {', '.join(MODES)} at a "
            "time; give one"
        )
    if "--version" in argv or any(getattr(args, name, None) for name in STAND_ASIDE):
        raise UsageError("another config or action")
    parser = OverridesParser.create()
    for override in args.overrides:  # one by one: the one Hydra cannot read is named
        try:
            parser.parse_overrides([override])
        except HydraException as err:
            said = [line for line in str(err).splitlines() if line.strip()]
            said = [line for line in said if not line.startswith(HYDRA_FRAME)] or said
            fix = "write key=value, the key as dotted names, a value of other characters than "
            fix += "letters, digits and ._-/ in quotes"
            if "=~" in override:  # a path from home: the shell expands $HOME, Hydra no ~
                fix = "give a path from home as $HOME/... (Hydra does not expand ~)"
            raise Unreadable(
                f"{override}: Hydra cannot read this override ({summary_line(said[0])}); {fix} "
                "(https://hydra.cc/docs/advanced/override_grammar/basic)"
            ) from err
    return parser.parse_overrides(args.overrides)


# Hydra's flags that say what it does, of which it takes one (their arguments' names).
MODES = {"--run": "run", "--multirun": "multirun", "--cfg": "cfg", "--info": "info"}
MODES["--shell-completion"] = "shell_completion"


def unread_argument(argv: list[str], unread: list[str]) -> str:
    """What Hydra's command line does not read: a flag it lacks, or an override after a flag
    that came after other overrides (it reads them together, before or after its flags)."""
    flags = [a for a in unread if a.startswith("-")]
    if flags:
        return f"{flags[0]} is not a flag of this command: --help lists them"
    first = len(argv) - len(unread)  # the overrides argparse left are the line's last ones
    before = argv[:first] if argv[first:] == unread else []
    at = max((i for i, a in enumerate(before) if a.startswith("-")), default=None)
    if at is None:
        return f"{unread[0]} is not read by Hydra's command line: give the overrides together"
    value = [v for v in before[at + 1 : at + 2] if "=" not in v]  # --cfg job, -cn mine
    flag = " ".join([before[at], *value])
    return (
        f"{unread[0]}: an override after {flag} is not read, where other overrides came before "
        f"{flag}: give {flag} before every override (or after them all)"
    )


def raise_usage_error(message: str) -> None:
    raise UsageError(message)


def values(override: Any) -> list[Any]:
    """The values an override gives: each of a choice sweep's, none of a range's or glob's."""
    value = override.value()
    return list(getattr(value, "list", [])) if override.is_sweep_override() else [value]


def option_values(override: Any) -> list[str]:
    """The options an override names that a check can read (no null, no ``${``)."""
    return [v for v in values(override) if isinstance(v, str) and "$" not in v]


# The configs composed in this process, by their lines: a composition takes about 0.2 s, a copy
# 0.01 s, and the checks of one command line (the typo check, an interpolation's) and a sweep's
# jobs ask for the same choices' config again.
COMPOSED: dict[tuple[Any, ...], Any] = {}
MAX_COMPOSED = 64


class Offer:
    """What Hydra offers one primary config and command line: its groups and their options,
    and the config it composes from the command line's group choices (composed only when a
    key is asked for). Used within ``composing``."""

    def __init__(self, config_name: str, overrides: list[Any]):
        from hydra.core.global_hydra import GlobalHydra

        # Hydra's config sources, as its public loader gives them to plugins: its own listing
        # (get_group_options) deep-copies its repository on every call, 70 ms each
        self.sources = GlobalHydra.instance().config_loader().get_sources()
        self.config_name, self.overrides = config_name, overrides

    @functools.cached_property
    def listed(self) -> set[str]:
        """Every config group Hydra lists (``model/scheduler``), its own and plugins' included."""
        found, pending = set(), self.options("", "GROUP")
        while pending:
            found.add(group := pending.pop())
            pending += [f"{group}/{child}" for child in self.options(group, "GROUP")]
        return found - {"hydra"}

    @functools.cached_property
    def groups(self) -> set[str]:
        """The project's config groups, Hydra's own (``hydra/launcher``) aside."""
        return {group for group in self.listed if not group.startswith("hydra/")}

    def options(self, group: str, kind: str = "CONFIG") -> list[str]:
        """The options (``GROUP``: the groups) Hydra's sources list in ``group``."""
        from hydra.core.object_type import ObjectType

        found = (s.list(group, ObjectType[kind]) for s in self.sources if s.is_group(group))
        return sorted(set().union(*found))

    @functools.cached_property
    def config(self) -> Any:
        """The config Hydra composes from the command line's group choices (a sweep's first
        option), ``hydra`` node included; None where Hydra cannot compose them."""
        return self.compose([])

    @functools.cached_property
    def keys(self) -> set[str]:
        """Every dotted key of ``config``, Hydra's own (``hydra.run.dir``) included."""
        return composed_keys(self.config)

    def refused_value(self) -> str | None:
        """The first ``hydra.*`` override whose value a typed node of Hydra's config refuses
        (``hydra.sweeper.n_trials=abc``, ``hydra.job.chdir=maybe``), set as Hydra sets the
        overrides, on a copy of the composed ``hydra`` node: Hydra answers it with its page
        ("Error merging override", exit 1). The project's own config is YAML, untyped: only
        Hydra's node (its and its plugins' dataclasses) refuses a value's type. Said in one
        line with the type the key takes; None where every value is taken, or where Hydra
        refuses an override for another reason (it says why)."""
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.errors import ConfigCompositionException
        from omegaconf import OmegaConf
        from omegaconf.errors import ValidationError

        settings = [o for o in self.overrides if self.is_hydra_setting(o)]
        if not settings or self.config is None:
            return None
        hydra = OmegaConf.create({"hydra": self.config.hydra})  # a copy, its types kept
        for override in settings:
            try:
                ConfigLoaderImpl._apply_overrides_to_config([override], hydra)
            except ConfigCompositionException as err:
                if isinstance(err.__cause__, ValidationError):
                    return self.type_refusal(override, err.__cause__)
                return None
        return None

    def is_hydra_setting(self, override: Any) -> bool:
        """An override Hydra sets on its own node (``hydra.sweeper.n_trials=3``): not a
        group's choice, not a sweep (a sweep's values are set job by job)."""
        name = override.key_or_group
        group = name in self.listed or "/" in name or override.package is not None
        return name.startswith("hydra.") and not group and not override.is_sweep_override()

    def type_refusal(self, override: Any, error: Exception) -> str:
        """``key=value: key takes an integer (Hydra: <its words>); pass one, e.g. key=12``."""
        key, said = override.key_or_group, override.input_line
        words = summary_line(error)
        node = config_node(self.config, key)
        takes = node_type(node)
        if not takes:
            return f"{said}: Hydra's config refuses this value for {key} ({words}); pass another"
        takes += ["null"] if node._is_optional() else []
        example = node._value() if not is_container(node) else None
        example = EXAMPLES.get(type(node).__name__) if example is None else example
        shown = f", e.g. {key}={as_override(example)}" if example is not None else ""
        return f"{said}: {key} takes {either(takes)} (Hydra: {words}); pass one{shown}"

    def compose(self, more: list[str]) -> Any:
        """Hydra's composition of the command line's valid group choices and ``more``, or None:
        a copy of the one made for the same lines, sources and folder (``COMPOSED``)."""
        from hydra import compose

        lines = [*(line for o in self.overrides if (line := self.composable(o))), *more]
        key = (
            self.config_name,
            tuple(lines),
            cwd(),
            tuple((s.provider, s.path) for s in self.sources),
        )
        if key not in COMPOSED:
            try:
                COMPOSED[key] = compose(self.config_name, lines, return_hydra_config=True)
            except Exception:  # Hydra will say what is wrong with the choices themselves
                return None
            if len(COMPOSED) > MAX_COMPOSED:
                COMPOSED.pop(next(iter(COMPOSED)))  # the oldest
        return copy.deepcopy(COMPOSED[key])

    def composable(self, override: Any) -> str | None:
        """A group's choice as composition can take it (a deletion, or options all listed: a
        sweep's first), Hydra's own groups' too; None for anything else."""
        if override.key_or_group not in self.listed:
            return None
        if override.is_delete():
            return override.input_line
        options = option_values(override)
        listed = set(self.options(override.key_or_group))
        valid = options and None not in values(override) and set(options) <= listed
        return f"{override.get_key_element()}={options[0]}" if valid else None


def cwd() -> str | None:
    """The current folder, which Hydra records (``hydra.runtime.cwd``); None once deleted."""
    try:
        return os.getcwd()
    except OSError:
        return None


def composed_keys(cfg: Any) -> set[str]:
    """Every dotted key of a composed config (none for no config)."""
    from omegaconf import OmegaConf

    return set() if cfg is None else set(dotted_keys(OmegaConf.to_container(cfg), ""))


def dotted_keys(node: dict, prefix: str) -> list[str]:
    """Every key of a mapping, nested ones dotted (``model.optimizer.lr``)."""
    keys = []
    for name, value in node.items():
        keys.append(key := f"{prefix}.{name}" if prefix else str(name))
        keys += dotted_keys(value, key) if isinstance(value, dict) else []
    return keys


# What a typed node of Hydra's config takes, by OmegaConf's node class; an example where the
# node holds no value to show.
NODE_TYPES = {
    "IntegerNode": ["an integer"],
    "FloatNode": ["a number"],
    "BooleanNode": ["true", "false"],
    "StringNode": ["a string"],
    "PathNode": ["a path"],
    "BytesNode": ["bytes"],
    "DictConfig": ["a mapping ({key: value})"],
    "ListConfig": ["a list ([a, b])"],
}
EXAMPLES = {"IntegerNode": 1, "FloatNode": 0.5, "BooleanNode": True}


def config_node(cfg: Any, key: str) -> Any:
    """The node at a dotted key of a composed config (None where it has none)."""
    from omegaconf import OmegaConf

    parent, _, last = key.rpartition(".")
    holder = OmegaConf.select(cfg, parent) if parent else cfg
    try:
        return holder._get_node(last) if OmegaConf.is_dict(holder) else None
    except Exception:  # noqa: BLE001 - a key below a value: Hydra's words alone
        return None


def node_type(node: Any) -> list[str]:
    """What a typed node takes, in words (an enum: its members); none for another node."""
    if type(node).__name__ == "EnumNode":
        return [member.name for member in node.enum_type]
    return list(NODE_TYPES.get(type(node).__name__, []))


def is_container(node: Any) -> bool:
    return type(node).__name__ in ("DictConfig", "ListConfig")
