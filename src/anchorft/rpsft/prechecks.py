"""Checks of `anchorft train` and `anchorft rl` command lines made before torch, transformers or TRL is imported.

Their flags come from TRL's config dataclasses, read by TrlParser, and importing TRL takes seconds (about 5 to 15):
without these checks a missing `--config` file, a misspelt flag or a learning rate of 0 is reported only after that.
Here the flags and keys are read from the source of the config dataclasses (`source_fields`, with `ast`; nothing
is imported) and checked with the code the configs run themselves (`check_trainer_args`, the recipe's and the RL
config's key checks), so the one-line errors are the same ones. What these checks cannot decide (a value of a
type they do not convert, a class whose source they cannot find) is left to TrlParser, which checks everything
again: a check here refuses only what the full run refuses too, in the same words (tests/rpsft/test_prechecks.py).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import os
import sys
import types
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from anchorft.dataclass_yaml import resolve_presets
from anchorft.errors import check_keys, close_hint, did_you_mean
from anchorft.preflight import check_input_file, check_model_source, looks_like_path
from anchorft.resources import config_path
from anchorft.rpsft.anchor_options import check_anchor_numbers
from anchorft.rpsft.arg_checks import check_rpsft_numbers, check_trainer_args
from anchorft.rpsft.recipes import check_recipe_keys, read_recipe
from anchorft.rpsft.trl_fields import trl_table
from anchorft.runs import check_output_dir

__all__ = ["SourceField", "source_fields", "trl_flags_parser", "given_flags", "pop_config", "config_given"]
__all__ += ["source_defaults", "as_number", "check_values", "shadow_dataclass", "check_train_argv", "lora_rank_limit"]
__all__ += ["read_rl_config", "check_rl_argv", "method_rows", "field_choices", "string_to_bool", "check_train_inputs"]

MISSING = dataclasses.MISSING
UNKNOWN = object()  # a default that is no literal (a call, a name): never compared with anything

# lazily exported classes (their package's __init__ does not define them): the module that does
_DEFINED_IN = {
    ("trl", "SFTConfig"): "trl.trainer.sft_config",
    ("trl", "GRPOConfig"): "trl.trainer.grpo_config",
    ("transformers", "TrainingArguments"): "transformers.training_args",
}
# dense decoder families whose all-linear layers' largest smaller side follows from config.json alone
_DENSE_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


class SourceField(NamedTuple):
    """One dataclass field as its source declares it: the annotation's text, the default (MISSING, UNKNOWN when
    it is no literal), whether `__init__` takes it, the argparse settings its metadata gives HfArgumentParser
    (`nargs`, `aliases`), its help, and its metadata's "choices" (a literal list, else the expression's text)."""

    name: str
    annotation: str
    default: Any
    init: bool
    nargs: str | int | None = None
    aliases: tuple[str, ...] = ()
    help: str = ""
    choices: list | str | None = None


class _NotFound(Exception):
    pass


class _Undecided(Exception):
    """The pre-parse met something it does not decide (TrlParser will report it)."""


def _module_file(module: str) -> Path:
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)  # a top-level name: found without importing the package
    if spec is None:
        raise _NotFound(module)
    if not spec.submodule_search_locations:
        if rest or spec.origin is None:
            raise _NotFound(module)
        return Path(spec.origin)
    base = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
    for path in (base.parent / f"{base.name}.py", base / "__init__.py"):
        if path.is_file():
            return path
    raise _NotFound(module)


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _imported(tree: ast.Module, module: str, name: str) -> tuple[str, str] | None:
    """(module, name) that a top-level `from X import name` of `module` brings in."""
    package = module.rsplit(".", 1)[0] if not _module_file(module).name == "__init__.py" else module
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    if node.level:
                        parts = package.split(".")
                        base = ".".join(parts[: len(parts) - node.level + 1])
                        return (f"{base}.{node.module}" if node.module else base), alias.name
                    return node.module or "", alias.name
    return None


def _literal(node: ast.expr | None) -> Any:
    if node is None:
        return MISSING
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN


def _constant(module: str, node: ast.expr | None, depth: int = 0) -> Any:
    """A default's value: a literal, or a module-level constant of `module` (or one it imports by name) assigned
    a literal (`default=PAPER_RANK`); UNKNOWN otherwise."""
    value = _literal(node)
    if value is not UNKNOWN or not isinstance(node, ast.Name) or depth > 5:
        return value
    try:
        tree = _tree(_module_file(module))
        for stmt in tree.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
            if any(isinstance(t, ast.Name) and t.id == node.id for t in targets):
                return _literal(stmt.value)
        source = _imported(tree, module, node.id)
    except (_NotFound, OSError, SyntaxError, UnicodeDecodeError):
        return UNKNOWN
    return UNKNOWN if source is None else _constant(source[0], ast.Name(id=source[1]), depth + 1)


def _declared(stmt: ast.AnnAssign, module: str) -> SourceField:
    value, init, meta = stmt.value, True, {}
    default = _constant(module, value)
    call = isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field")
    if call:
        kw = {k.arg: k.value for k in value.keywords}
        default = UNKNOWN if "default_factory" in kw else MISSING
        default = _constant(module, kw["default"]) if "default" in kw else default
        init = _literal(kw["init"]) is not False if "init" in kw else True
        if isinstance(kw.get("metadata"), ast.Dict):
            pairs = [(_literal(k), v) for k, v in zip(kw["metadata"].keys, kw["metadata"].values) if k]
            meta = {k: _literal(v) for k, v in pairs}
            meta["choices"] = next((_literal(v) if _literal(v) is not UNKNOWN else ast.unparse(v)
                                    for k, v in pairs if k == "choices"), None)  # fmt: skip
    aliases = meta.get("aliases", ())
    aliases = (aliases,) if isinstance(aliases, str) else tuple(aliases) if isinstance(aliases, (list, tuple)) else ()
    nargs = meta.get("nargs") if isinstance(meta.get("nargs"), (str, int)) else None
    text = meta.get("help") if isinstance(meta.get("help"), str) else ""
    choices = meta.get("choices")
    choices = list(choices) if isinstance(choices, (list, tuple)) else choices if isinstance(choices, str) else None
    return SourceField(stmt.target.id, ast.unparse(stmt.annotation), default, init, nargs, aliases, text, choices)


def _class_fields(module: str, name: str, depth: int = 0) -> dict[str, SourceField]:
    if depth > 20:
        raise _NotFound(name)
    module = _DEFINED_IN.get((module, name), module)
    tree = _tree(_module_file(module))
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:
        source = _imported(tree, module, name)
        if source is None:
            raise _NotFound(f"{module}.{name}")
        return _class_fields(*source, depth + 1)
    fields: dict[str, SourceField] = {}
    for base in reversed(cls.bases):  # dataclasses' order: the bases' fields first (reversed MRO), then its own
        if not isinstance(base, ast.Name):
            raise _NotFound(ast.unparse(base))
        if base.id == "object":
            continue
        local = any(isinstance(n, ast.ClassDef) and n.name == base.id for n in tree.body)
        source = (module, base.id) if local else _imported(tree, module, base.id)
        if source is None:
            raise _NotFound(base.id)
        fields.update(_class_fields(*source, depth + 1))  # an overridden field keeps its place, as in dataclasses
    if not any("dataclass" in ast.unparse(d) for d in cls.decorator_list):
        return fields  # a plain base: its annotations are no fields
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.simple:
            if not any(v in ast.unparse(stmt.annotation) for v in ("ClassVar", "InitVar")):
                fields[stmt.target.id] = _declared(stmt, module)
    return fields


def source_defaults(module: str, name: str) -> dict[str, Any] | None:
    """{parameter: default} of the function `name` of `module` (as `flags.keyword_defaults` gives them), read from
    its source without importing the module; None unless every default is a literal there."""
    try:
        tree = _tree(_module_file(module))
    except (_NotFound, OSError, SyntaxError, UnicodeDecodeError):
        return None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if fn is None:
        return None
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    pairs = [*zip(positional[len(positional) - len(a.defaults) :], a.defaults)]
    pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
    out = {arg.arg: _literal(d) for arg, d in pairs}
    return None if any(v is UNKNOWN for v in out.values()) else out


def source_fields(module: str, name: str) -> dict[str, SourceField] | None:
    """The fields of the dataclass `name` of `module` in `dataclasses.fields`' order, read from the source files of
    it and its bases without importing them; None when a class or a base is not found there (the caller then
    leaves its checks to the imported classes)."""
    try:
        return _class_fields(module, name)
    except (_NotFound, OSError, SyntaxError, UnicodeDecodeError):
        return None


def _union_members(annotation: str) -> list[str]:
    node = ast.parse(annotation, mode="eval").body
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return [*_union_members(ast.unparse(node.left)), *_union_members(ast.unparse(node.right))]
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).split(".")[-1] in ("Optional", "Union"):
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        members = [m for e in inner for m in _union_members(ast.unparse(e))]
        return [*members, "None"] if ast.unparse(node.value).endswith("Optional") else members
    return ["None" if annotation in ("None", "NoneType") else annotation]


def _argparse_shape(f: SourceField) -> tuple[str | None, bool]:
    """(nargs, whether a `--no_NAME` complement exists) of the field's flag, by HfArgumentParser's rules."""
    members = _union_members(f.annotation)
    kind = members[0]
    if len(members) > 1:
        if "None" not in members:
            kind = members[0] if members[1] == "str" else members[1]
        elif "bool" not in members:
            kind = members[0] if members[1] == "None" else members[1]
        else:
            kind = "bool | None" if sorted(members) == ["None", "bool"] else "union"
    if kind in ("bool", "bool | None"):
        takes_one = kind == "bool" or f.default not in (None, MISSING)
        return ("?" if takes_one else f.nargs), f.default is True
    if kind.split("[")[0].split(".")[-1] in ("list", "List"):
        return "+", False
    return f.nargs, False


class _PreParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise _Undecided(message)


# argparse's refusals of a value the pre-parse decides as TrlParser does: a conversion or a choice
_VALUE_ERRORS = (": invalid int value: ", ": invalid float value: ", ": invalid choice: ", ": Truthy value expected: ")


def string_to_bool(v: str | bool) -> bool:
    """transformers' `HfArgumentParser` reading of a bool flag's value, with its words for a refusal."""
    if isinstance(v, bool):
        return v
    if v.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if v.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(
        f"Truthy value expected: got {v} but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive)."
    )


_CONVERSIONS = {"int": int, "float": float, "bool": string_to_bool}


def method_rows() -> list[tuple[str, bool, str]]:
    """(name, anchored, help) of every row of the methods table (`anchorft.rpsft.methods`): the loaded table when it
    is imported (rows registered at run time included), else its `register(Method(...))` rows read from its
    source."""
    if "anchorft.rpsft.methods" in sys.modules:
        return [(m.name, m.anchored, m.help) for m in sys.modules["anchorft.rpsft.methods"].METHODS.values()]
    rows = []
    for node in ast.walk(_tree(_module_file("anchorft.rpsft.methods"))):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "Method" and len(node.args) > 1:
            name, text, kw = _literal(node.args[0]), _literal(node.args[1]), {k.arg: k.value for k in node.keywords}
            if isinstance(name, str):
                anchored = "anchored" in kw and _literal(kw["anchored"]) is True
                rows.append((name, anchored, text if isinstance(text, str) else ""))
    return rows


def field_choices(f: SourceField, trl_row: dict | None = None) -> list | None:
    """The values a field takes, as its flag offers them: its metadata's list, the methods table for `method` (and
    'none' with the anchored methods for `anchor_method`), else the TRL table's (an enum's values)."""
    if isinstance(f.choices, str):
        if "RL_ANCHOR_METHODS" in f.choices:
            return ["none", *(n for n, anchored, _ in method_rows() if anchored)]
        if "METHODS" in f.choices:
            return [n for n, _, _ in method_rows()]
        return None
    if f.choices is not None:
        return list(f.choices)
    return (trl_row or {}).get("choices")


def _value_type(f: SourceField, trl_row: dict | None) -> Any:
    """The conversion TrlParser applies to the field's flag value (None: none the pre-parse decides)."""
    if trl_row is not None:
        return _CONVERSIONS.get(trl_row["type"])
    members = [m for m in _union_members(f.annotation) if m != "None"]
    return _CONVERSIONS.get(members[0]) if len(members) == 1 else None


def trl_flags_parser(fields: list[SourceField], prog: str, trl_class: str | None = None) -> argparse.ArgumentParser:
    """An argparse parser with the flags TrlParser makes of `fields` (`--name`, `--name-with-dashes`, a bool's
    `--no_name`), each taking as many values as there; only the flags given are set. With `trl_class` (a class of
    `trl_fields.TRL_CLASSES`, the fields' TRL base), the values are converted and their choices checked as TrlParser
    does (types and choices: the field's own, else the shipped TRL table's); otherwise they stay strings."""
    table = trl_table().get(trl_class, {}) if trl_class else None
    p = _PreParser(prog=prog, add_help=False, allow_abbrev=False)
    p.add_argument("-h", "--help", action="store_true", default=argparse.SUPPRESS)
    for f in fields:
        if not f.init:
            continue
        nargs, complement = _argparse_shape(f)
        flags = [f"--{f.name}", *([f"--{f.name.replace('_', '-')}"] if "_" in f.name else []), *f.aliases]
        kw: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "nargs": nargs}
        if table is not None:
            row = table.get(f.name)
            kw |= {"type": _value_type(f, row), "choices": field_choices(f, row)}
        p.add_argument(*flags, **(kw | ({"const": True} if nargs == "?" else {})))
        if complement:
            no = (f"--no_{f.name}", f"--no-{f.name.replace('_', '-')}")
            p.add_argument(*no, dest=f.name, action="store_false", default=argparse.SUPPRESS)
    return p


def given_flags(
    argv: list[str], fields: list[SourceField], prog: str, trl_class: str | None = None
) -> dict[str, Any] | None:
    """The fields the flags of `argv` set (values as typed; converted with `trl_class`, see `trl_flags_parser`);
    None when the parse is left to TrlParser. An unknown flag, a value of the wrong type or not among the field's
    choices are TrlParser's one-line errors, in its words (argparse's `error`, as `anchorft.cli` reports it)."""
    if trl_class is not None:
        typed = trl_flags_parser(fields, prog, trl_class)
        try:
            typed.parse_known_args(argv)
        except _Undecided as e:
            if any(w in str(e) for w in _VALUE_ERRORS):
                argparse.ArgumentParser.error(typed, str(e))  # TrlParser's refusal (exit 2), through the CLI's error
        except argparse.ArgumentError:
            pass
    parser = trl_flags_parser(fields, prog)
    try:
        ns, rest = parser.parse_known_args(argv)
    except (_Undecided, argparse.ArgumentError):
        return None
    if rest:
        raise ValueError(f"unrecognized arguments: {did_you_mean(parser, rest)}")
    return vars(ns)


def pop_config(argv: list[str]) -> tuple[list[str], str | None]:
    """argv without its first `--config FILE` (or `--config=FILE`), and FILE, as `parse_with_config` reads it."""
    for i, a in enumerate(argv):
        if a == "--config" or a.startswith("--config="):
            path = a.partition("=")[2] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            if not path:
                raise ValueError("--config needs a YAML file")
            return argv[:i] + argv[i + (1 if "=" in a else 2) :], path
    return argv, None


def as_number(value: Any, cast: type) -> Any:
    """A flag's string converted as argparse converts it, a YAML number as it is; None for anything else (bools,
    strings argparse would refuse, other types: TrlParser's checks report those)."""
    if isinstance(value, str):
        try:
            return cast(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if cast is float or isinstance(value, int) else None


def check_values(values: dict[str, Any]) -> None:
    """The trainer arguments' own checks (`check_trainer_args`) on the values that are set and of their type."""
    lr, steps = as_number(values.get("learning_rate"), float), as_number(values.get("max_steps"), int)
    report = values.get("report_to")
    if not (report is None or isinstance(report, str) or (isinstance(report, list) and all(map(_is_str, report)))):
        report = None
    args = types.SimpleNamespace(learning_rate=1.0 if lr is None else lr, max_steps=-1 if steps is None else steps)
    args.report_to = report
    check_trainer_args(args)
    anchor = _numbers(values, {"anchor_rank": (int, 1), "anchor_lambda": (float, 0.0)})
    check_anchor_numbers(anchor)


def _numbers(values: dict[str, Any], fields: dict[str, tuple[type, Any]]) -> types.SimpleNamespace:
    """The `fields` as TrlParser would convert them (`as_number`), each a valid stand-in (its pair's second) where
    it is unset or of a type TrlParser's own checks report: what the torch-free checks read."""
    out = types.SimpleNamespace()
    for name, (cast, ok) in fields.items():
        v = as_number(values.get(name), cast)
        setattr(out, name, ok if v is None else v)
    return out


def check_rpsft_values(values: dict[str, Any]) -> None:
    """`anchorft train`'s own values that need no torch: the method (did-you-mean from the methods table's
    source), anchor_every and the LoRA numbers (`arg_checks.check_rpsft_numbers`, RPSFTConfig's messages)."""
    method = values.get("method")
    if isinstance(method, str) and (names := [n for n, _, _ in method_rows()]) and method not in names:
        raise ValueError(f"method: unknown {method!r}{close_hint(method, names)} (one of {', '.join(names)})")
    nums = {"anchor_every": (int, 1), "lora_rank": (int, 1), "lora_alpha": (float, 1.0), "lora_dropout": (float, 0.0)}
    check_rpsft_numbers(_numbers(values, nums))


def _is_str(x: Any) -> bool:
    return isinstance(x, str)


def lora_rank_limit(model: str | os.PathLike, targets: str = "all-linear") -> int | None:
    """The largest smaller side of the matrices LoRA adapts under `targets` "all-linear" (every linear layer but the
    output layer), from a local config.json of a dense Llama / Mistral / Qwen2 / Qwen3 model; None otherwise (other
    layouts are checked on the loaded model)."""
    path = Path(model) / "config.json"
    if targets != "all-linear" or not path.is_file():
        return None
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
        if cfg.get("model_type") not in _DENSE_FAMILIES:
            return None
        hidden, inter, heads = int(cfg["hidden_size"]), int(cfg["intermediate_size"]), int(cfg["num_attention_heads"])
        head_dim = int(cfg.get("head_dim") or hidden // heads)
    except (ValueError, TypeError, KeyError, OSError, ZeroDivisionError):
        return None
    return max(min(hidden, heads * head_dim), min(hidden, inter))  # q / o projections, MLP (k, v are smaller)


def _check_lora_rank(values: dict[str, Any]) -> None:
    """lora_rank against the model's matrices, the message `peft_methods` gives after loading it."""
    if values.get("method") != "lora":
        return
    rank, model = as_number(values.get("lora_rank", 32), int), values.get("model_name_or_path")
    if rank is None or not isinstance(model, str):
        return
    largest = lora_rank_limit(model, values.get("lora_target_modules", "all-linear"))
    if largest is not None and rank > largest:
        raise ValueError(
            f"lora_rank={rank} exceeds the smaller side of every adapted matrix (at most {largest}): no update can "
            f"have that rank; use lora_rank <= {largest}"
        )


def shadow_dataclass(name: str, fields: list[SourceField]) -> type:
    """A dataclass named `name` with the init fields' names (no types): what the key checks read."""
    return dataclasses.make_dataclass(name, [(f.name, Any, dataclasses.field(default=None)) for f in fields if f.init])


def config_given(argv: list[str]) -> str | None:
    """The `--config FILE` (or `--config=FILE`) of argv; None when there is none or no FILE after it."""
    try:
        return pop_config(list(argv))[1]
    except ValueError:
        return None


def check_train_argv(argv: list[str]) -> dict[str, Any] | None:
    """`anchorft train`'s command line (aliases applied, --overwrite removed) checked without TRL: the --config
    recipe found, read and its keys known; the flags known; learning_rate, max_steps, report_to and a lora run's
    rank valid (ValueError: TrlParser's message). Returns the fields the recipe and the flags set (flags as typed),
    None when the flags are left to TrlParser."""
    argv, config = pop_config(list(argv))
    values: dict[str, Any] = {}
    script = source_fields("anchorft.rpsft.config", "ScriptArguments")
    trainer = source_fields("anchorft.rpsft.config", "RPSFTConfig")
    if config is not None:
        recipe, _, origin, path = read_recipe(config)
        if script is not None and trainer is not None:
            check_recipe_keys(recipe, origin, path, [n for n, f in {**script, **trainer}.items() if f.init])
        values.update(recipe)
    given = None
    if script is not None and trainer is not None:
        given = given_flags(argv, [*script.values(), *trainer.values()], "anchorft train", "SFTConfig")
    values.update(given or {})
    check_values(values)
    check_rpsft_values(values)
    _check_lora_rank(values)
    return None if given is None else values


_DATA_FILES = (".jsonl", ".json", ".parquet")


def _check_local_data(spec: Any, flag: str) -> bool:
    """A dataset named as a local file (it exists, or looks like a path or a data file): exists, is readable, and
    for .jsonl every line is a JSON object, as `rpsft.data.check_sft_source` checks it first; hub names and
    folders are left to it. False when the first JSONL row has neither layout SFT reads, whose message
    `check_sft_source` gives before the other inputs' (the checks after this one are then left to it too)."""
    if not isinstance(spec, str) or os.path.isdir(spec):
        return True
    if os.path.exists(spec) or looks_like_path(spec) or os.path.splitext(spec)[1].lower() in _DATA_FILES:
        check_input_file(spec, flag)
        if spec.lower().endswith(".jsonl"):
            with open(spec, encoding="utf-8") as f:
                first = next(json.loads(line) for line in f if line.strip())
            return {"prompt", "completion"} <= first.keys() or "messages" in first
    return True


def check_train_inputs(values: dict[str, Any]) -> None:
    """What `rpsft.train.check_train_inputs` checks that needs no library, in its order, on the values the recipe
    and the flags set (`check_train_argv`): the local data files, the model and tokenizer sources, the output
    folder. Before TRL loads, with its messages; the data's columns and the model folder's weights, which it checks
    after the output folder, are left to it (a file of another schema is reported before a model without weights).
    """
    if not (_check_local_data(values.get("dataset"), "--dataset")
            and _check_local_data(values.get("eval_dataset"), "--eval_dataset")):  # fmt: skip
        return
    check_model_source(values.get("model_name_or_path"), "--model_name_or_path")
    check_model_source(values.get("tokenizer_name_or_path"), "--tokenizer_name_or_path", what="tokenizer")
    if isinstance(values.get("output_dir"), str):
        check_output_dir(values["output_dir"], "--output_dir")


def read_rl_config(path: str, dapo: type) -> tuple[str, dict]:
    """(file, mapping) of `anchorft rl`'s `--config` YAML (`preset:` parents merged), its keys checked against
    RLScriptArguments and `dapo` (DAPOConfig, or a stand-in with its field names read before TRL is imported)."""

    path = str(config_path(path))  # a file, else a shipped config by name (rl/dapo)
    cfg = resolve_presets(path)
    script_keys = set(source_fields("anchorft.rpsft.dapo_config", "RLScriptArguments") or ())
    check_keys({k: v for k, v in cfg.items() if k not in script_keys}, dapo, path)
    return path, cfg


def check_rl_argv(argv: list[str]) -> dict[str, Any] | None:
    """`anchorft rl`'s command line (--out spellings applied) checked before TRL is imported: the --config file
    found, read and its keys known; the flags known; learning_rate, max_steps and report_to valid. ValueError: the
    message TrlParser and DAPOConfig give."""

    argv, config = pop_config(list(argv))
    script = source_fields("anchorft.rpsft.dapo_config", "RLScriptArguments")
    dapo = source_fields("anchorft.rpsft.dapo_config", "DAPOConfig")
    values: dict = {}
    if config is not None and dapo is not None:
        values.update(read_rl_config(config, shadow_dataclass("DAPOConfig", list(dapo.values())))[1])
    elif config is not None:
        config_path(config)
    given = None
    if script is not None and dapo is not None:
        given = given_flags(argv, [*script.values(), *dapo.values()], "anchorft rl", "GRPOConfig")
        values.update(given or {})
    lr, temperature = as_number(values.get("learning_rate"), float), as_number(values.get("temperature"), float)
    beta = as_number(values.get("beta"), float)
    if any(v is not None and v <= 0 for v in (lr, temperature)) or (beta is not None and beta < 0):
        raise ValueError("need beta >= 0, learning_rate > 0, temperature > 0")  # DAPOConfig's check, in its words
    check_values(values)
    return None if given is None else values
