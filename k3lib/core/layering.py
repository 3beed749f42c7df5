"""Parameters files read and layered: YAML files merged left to right (each after what it `extends:`), `--set
key.path=value` last, with the provenance of every key; and untrusted data validated through a pydantic model into
one `BadInputError` line naming the file that set the field, the field's path and what is expected.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .errors import BadInputError
from .yamlsafe import safe_load as yaml_load


def read_yaml(path: Path, what: str) -> Any:
    """A YAML (or JSON) file's data; unreadable or invalid text is one BadInputError line naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInputError(f"file not found; expected {what}", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read: {exc}", source=str(path)) from None
    try:
        return yaml_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInputError(f"{where}: not valid YAML ({problem})", source=str(path)) from None


def _read_yaml(path: Path) -> dict[str, Any]:
    data = read_yaml(path, "a YAML parameters file")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInputError(f"expected a mapping of sections (target:, recipe:, …), got {type(data).__name__}",
                            source=str(path))
    return data


def _merge(base: dict[str, Any], layer: dict[str, Any], origin: str, prov: dict[str, str],
           prefix: str = "") -> None:
    for key, value in layer.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value, origin, prov, path + ".")
        else:
            base[key] = copy.deepcopy(value)
            prov[path] = origin


def parse_set(expr: str) -> tuple[list[str], Any]:
    """`a.b.c=value` → (["a","b","c"], YAML-typed value)."""
    key, sep, raw = expr.partition("=")
    if not sep or not key.strip() or any(not p for p in key.strip().split(".")):
        raise BadInputError(f"expected key.path=value, got {expr!r}", source="--set")
    try:
        value = yaml_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def _provenance(loc: tuple[Any, ...], prov: dict[str, str], default: str) -> str:
    dotted = [str(p) for p in loc if not isinstance(p, int)]
    for n in range(len(dotted), 0, -1):
        hit = prov.get(".".join(dotted[:n]))
        if hit:
            return hit
    # a child key set in a file makes that file the best guess for its parent's error (e.g. an unknown key)
    for path, origin in sorted(prov.items(), reverse=True):
        if dotted and path.startswith(".".join(dotted) + "."):
            return origin
    return default


def _expected(err: Mapping[str, Any], reference: str = "parameters/production.example.yaml") -> str:
    kind, msg = err.get("type", ""), err.get("msg", "")
    if kind == "extra_forbidden":
        return f"unknown key; check its spelling against {reference}"
    if kind == "missing":
        return "required field is missing"
    if kind.startswith(("date_", "datetime_")):
        return f"expected an ISO date such as 2026-11-28 (got {err.get('input')!r})"
    msg = msg.removeprefix("Value error, ")
    given = err.get("input")
    if kind not in ("missing",) and not isinstance(given, (dict, list)) and given is not None:
        return f"{msg} (got {given!r})"
    return msg


#: the profiles the kit ships (`kimi-k3.yaml`…): what a bare `extends:` name falls back to
KIT_PARAMETERS = Path(__file__).resolve().parents[2] / "parameters"


def _parent(path: Path, parent: str) -> Path:
    """An `extends:` entry: relative to the file that names it; a name not found there is one of the kit's own
    profiles (so a parameters file copied out of the repository, `extends: kimi-k3.yaml`, still works)."""
    beside = (path.parent / parent).resolve()
    if beside.exists() or Path(parent).is_absolute():
        return beside
    shipped = (KIT_PARAMETERS / parent).resolve()
    if shipped.is_file():
        return shipped
    raise BadInputError(f"{parent} not found beside this file ({beside}) nor among the kit's profiles "
                        f"({KIT_PARAMETERS})", source=str(path), field="extends")


def _layer(path: Path, merged: dict[str, Any], prov: dict[str, str], seen: tuple[Path, ...] = ()) -> None:
    """One file, after the files it `extends:` (paths relative to it, else the kit's own profiles), so a target
    file can reuse a recipe."""
    data = _read_yaml(path)
    parents = data.pop("extends", None)
    if parents is not None:
        if isinstance(parents, str):
            parents = [parents]
        if not isinstance(parents, list) or not all(isinstance(x, str) for x in parents):
            raise BadInputError("expected a file name or a list of file names", source=str(path), field="extends")
        for parent in parents:
            ppath = _parent(path, parent)
            if ppath in seen:
                raise BadInputError(f"extends itself through {parent}", source=str(path), field="extends")
            _layer(ppath, merged, prov, seen + (ppath,))
    _merge(merged, data, str(path), prov)


def layer(files: Sequence[str | Path], sets: Sequence[str] = (), *,
          base: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The YAML `files` merged left to right (each after what it `extends:`), `sets` applied last; with the
    provenance of every key path (which file or override set it), for error messages."""
    merged: dict[str, Any] = copy.deepcopy(base) if base else {}
    prov: dict[str, str] = {}
    for f in files:
        _layer(Path(f), merged, prov, (Path(f).resolve(),))
    for expr in sets:
        keys, value = parse_set(expr)
        node = merged
        for k in keys[:-1]:
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        node[keys[-1]] = value
        key = expr.partition("=")[0]
        prov[".".join(keys)] = f"--set {key if key.isprintable() else repr(key)}"
    return merged, prov


# Top-level sections that say which command a parameters file is for.
COMMAND_SECTIONS = {"k3 validate": ("recipe", "contract", "axes"), "k3 review": ("review",)}


def check_command(files: Sequence[str | Path], command: str) -> None:
    """A parameters file written for the other command is named as such (one line), before any field error."""
    for f in files:
        try:
            top = yaml_load(Path(f).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # the loader itself says what is wrong with it
        if not isinstance(top, dict):
            continue
        mine = any(k in top for k in COMMAND_SECTIONS[command])
        other = next((c for c, keys in COMMAND_SECTIONS.items() if c != command and any(k in top for k in keys)),
                     None)
        if other and not mine:
            keys = ", ".join(k for k in COMMAND_SECTIONS[other] if k in top)
            raise BadInputError(f"this is a parameters file for `{other}` (top-level {keys}), not for `{command}`",
                                source=str(f))


M = TypeVar("M", bound=BaseModel)


def validate_model(model: type[M], data: Any, *, source: str, prov: dict[str, str] | None = None,
                   reference: str = "parameters/production.example.yaml") -> M:
    """Untrusted data through a pydantic model; the first error as one BadInputError line naming the input
    (the file or override that set the field, when `prov` knows it), the field and what is expected."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err.get("loc", ()))
        # a key is untrusted text: one with a newline or a control character is shown quoted, so the error
        # stays on the one line the CLI prints
        field = ".".join(str(p) if str(p).isprintable() else repr(p) for p in loc) or "(top level)"
        where = _provenance(loc, prov or {}, source)
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise BadInputError(_expected(err, reference) + more, source=where, field=field) from None
