"""Check Kubernetes manifests with the kubernetes client's models, offline: every field is one the API knows,
every value has the field's type, every required field is present, a CronJob's schedule is a valid cron expression.

Usage: .venv-airflow/bin/python scripts/k8s_check.py FILE...   (the kubernetes client lives in the Airflow
environment, `make airflow`, not in the kit's). Prints one line per problem (FILE: document N KIND: path: what)
and exits 1, or one line per document checked and exits 0; 2 when a file cannot be read as YAML.

The models alone are lenient (their deserializer drops unknown keys); the walk below over each model's
`openapi_types` and `attribute_map` is what refuses a misspelt field, and building the model (client-side
validation) is what refuses a missing required one.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import kubernetes.client as models
import yaml
from croniter import croniter
from kubernetes.client import ApiClient

# apiVersion, kind → the model class name; a kind not listed is refused (nothing goes unchecked)
KINDS = {
    ("batch/v1", "CronJob"): "V1CronJob",
    ("batch/v1", "Job"): "V1Job",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("v1", "Secret"): "V1Secret",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
}
PRIMITIVES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
                                           "datetime": (str,), "date": (str,), "bytes": (str,)}
# the type strings of the models' `openapi_types`: "List[V1Container]", "Dict[str, str]", "Optional[...]" (older
# clients: "list[...]", "dict(str, ...)")
LIST = re.compile(r"^[Ll]ist\[(.*)\]$")
DICT = re.compile(r"^(?:Dict\[[^,]*, (.*)\]|dict\([^,]*, (.*)\))$")
OPTIONAL = re.compile(r"^Optional\[(.*)\]$")


def walk(value: Any, kind: str, path: str, problems: list[str]) -> None:
    if value is None:
        return  # an explicit null is "unset"; a required one is caught when the model is built
    if kind == "object":
        return  # free-form (e.g. an int-or-string): the model takes anything
    if m := OPTIONAL.match(kind):
        walk(value, m.group(1), path, problems)
    elif m := LIST.match(kind):
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            walk(item, m.group(1), f"{path}[{i}]", problems)
    elif m := DICT.match(kind):
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a mapping, got {type(value).__name__}")
            return
        for key, item in value.items():
            walk(item, m.group(1) or m.group(2), f"{path}.{key}", problems)
    elif kind in PRIMITIVES:
        wanted = PRIMITIVES[kind]
        if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
            problems.append(f"{path}: expected {kind}, got {type(value).__name__} {value!r}")
    else:
        cls = getattr(models, kind)
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a {kind} mapping, got {type(value).__name__}")
            return
        fields = {json_key: attr for attr, json_key in cls.attribute_map.items()}
        for key, item in value.items():
            if key not in fields:
                problems.append(f"{path}.{key}: unknown field of {kind} (known: {', '.join(sorted(fields))})")
            else:
                walk(item, cls.openapi_types[fields[key]], f"{path}.{key}", problems)


def check_document(doc: Any) -> tuple[str, list[str]]:
    if not isinstance(doc, dict):
        return "?", [f"expected a mapping, got {type(doc).__name__}"]
    key = (doc.get("apiVersion"), doc.get("kind"))
    name = f"{key[1]} {((doc.get('metadata') or {}).get('name'))}"
    if key not in KINDS:
        return name, [f"apiVersion/kind {key[0]}/{key[1]} is not one this check knows ({sorted(KINDS)})"]
    problems: list[str] = []
    walk(doc, KINDS[key], "", problems)
    if not problems:
        try:
            ApiClient().deserialize(json.dumps(doc), KINDS[key], "application/json")
        except (ValueError, TypeError) as exc:  # client-side validation: a required field missing, a bad enum
            problems.append(" ".join(str(exc).split()).split(" For further information")[0])
    if key == ("batch/v1", "CronJob") and not croniter.is_valid(str((doc.get("spec") or {}).get("schedule"))):
        problems.append(f"spec.schedule: {doc['spec'].get('schedule')!r} is not a cron expression")
    return name, problems


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    bad = False
    for file in argv:
        try:
            docs = [d for d in yaml.safe_load_all(Path(file).read_text(encoding="utf-8")) if d is not None]
        except (OSError, yaml.YAMLError) as exc:
            print(f"{file}: cannot read as YAML: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2
        for i, doc in enumerate(docs, 1):
            name, problems = check_document(doc)
            for p in problems:
                print(f"{file}: document {i} {name}: {p}")
            bad = bad or bool(problems)
            if not problems:
                print(f"{file}: document {i} {name}: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
