"""`k3 paths` on two different engines: the emulator as one path, the llama.cpp server (a 270M model that really
fails some tasks) as the other. Skips without the opt-in build (`make realengine`); CI requires it."""

from __future__ import annotations

import json

import yaml

from k3lib.cli.main import main
from k3lib.emulator import EmulatorConfig, start_emulator
from k3lib.axes.paths import builtin_task_set, read_paths_record
from k3lib.axes.paths.record import SCHEMA_FILE
from realengine import RealEngine

import jsonschema


def test_emulator_vs_llama_cpp_same_tasks(real_engine: RealEngine, tmp_path, capsys):
    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02), host="127.0.0.1", port=0) as emu:
        section = {"task_set": "builtin", "currency": "EUR", "max_duration_s": 600,
                   "request": {"max_tokens": 64, "max_tool_rounds": 3},  # the engine is not judged here: short answers
                   "retry": {"max_retries": 1, "timeout_s": 120, "backoff_s": 0.1},
                   "endpoints": {"self_hosted": {"base_url": emu.url, "price_input_per_mtok": 0.0,
                                                 "price_output_per_mtok": 0.0, "concurrency": 2},
                                 "api": {"base_url": real_engine.base_url, "price_input_per_mtok": 0.6,
                                         "price_output_per_mtok": 2.5, "concurrency": 1}}}
        params = tmp_path / "paths.yaml"
        params.write_text(yaml.safe_dump({"paths": section}, sort_keys=False), encoding="utf-8")
        rc = main(["paths", "-p", str(params), "--out", str(tmp_path / "out")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    run = sorted((tmp_path / "out").iterdir())[-1]
    record = json.loads((run / "evidence" / "paths.json").read_text())
    jsonschema.validate(record["result"], json.loads(SCHEMA_FILE.read_text()))
    r = read_paths_record(run)
    n = len(builtin_task_set().tasks)
    api = next(s for s in r.paths if s.path == "api")
    assert api.tasks_run == n and api.answered > 0  # the real engine answered, task by task
    assert api.accepted < n  # the small model fails some of the reference tasks under the same quality rule
    assert r.pairs[0].pairs == n
    assert "path api: accepted" in out.out and "paired self_hosted vs api" in out.out
