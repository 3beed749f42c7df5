"""The command line: every command has help and is named in docs/cli.md; bad input is one line, exit 2."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import k3lib
from k3lib.cli.main import build_parser, main
from k3lib.core.procs import end_process

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[list[str]]:
    out = []
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append([name])
                for a in sub._actions:
                    if isinstance(a, argparse._SubParsersAction):
                        out += [[name, k] for k in a.choices]
    return out


COMMANDS = _commands()


def test_the_command_list_is_not_empty():
    assert ["validate"] in COMMANDS and ["demo"] in COMMANDS and ["inspect", "metrics"] in COMMANDS


@pytest.mark.parametrize("cmd", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_every_command_has_help_and_is_in_the_readme(cmd, capsys):
    with pytest.raises(SystemExit) as info:
        main(cmd + ["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: k3 " + " ".join(cmd))
    assert len(out.splitlines()) > 3
    readme = (ROOT / "docs" / "cli.md").read_text()
    assert f"k3 {' '.join(cmd)}" in readme, f"`k3 {' '.join(cmd)}` is not named in docs/cli.md"


def test_python_dash_m_is_the_same_command():
    proc = subprocess.run([sys.executable, "-m", "k3lib", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "validate" in proc.stdout


def test_unknown_option_is_one_line_exit_2(capsys):
    assert main(["validate", "--no-such-option"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--no-such-option" in err[0]


def test_inspect_missing_file_is_one_line_exit_2(capsys, tmp_path):
    assert main(["inspect", "log", str(tmp_path / "nope.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.txt" in err[0] and "not found" in err[0]


def test_init_all_is_sorted_and_complete():
    assert k3lib.__all__ == sorted(k3lib.__all__)
    for name in k3lib.__all__:
        assert hasattr(k3lib, name)


def test_k3_emulator_prints_its_url_first_and_serves(tmp_path):
    import httpx

    proc = subprocess.Popen([sys.executable, "-m", "k3lib", "emulator", "--port", "0", "--time-scale", "0.05"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/version", timeout=10).json()["version"]
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    finally:
        end_process(proc, 15)


@pytest.mark.parametrize("argv, needle", [
    pytest.param(["validate", "-p", str(ROOT / "parameters/emulator.yaml"), "--fault", "no-such-fault"],
                 "unknown fault", id="unknown-fault"),
    pytest.param(["demo", "--fault", "tool-markup-leak=2.5"], "tool-markup-leak", id="share-out-of-range"),
    pytest.param(["demo", "--profile", "h100x1"], "unknown emulator profile", id="unknown-profile"),
    pytest.param(["emulator", "--port", "99999"], "expected a TCP port number 0-65535, got 99999", id="port-too-big"),
    pytest.param(["emulator", "--port", "http"], "expected a TCP port number", id="port-not-a-number"),
    pytest.param(["emulator", "--time-scale", "0"], "expected a positive number", id="time-scale-zero"),
    pytest.param(["review", "-p", str(ROOT / "parameters/emulator.yaml")],
                 "a parameters file for `k3 validate` (top-level contract, axes), not for `k3 review`",
                 id="acceptance-file-given-to-review"),
    pytest.param(["validate", "-p", str(ROOT / "parameters/renewal-demo.yaml")],
                 "a parameters file for `k3 review` (top-level review), not for `k3 validate`",
                 id="renewal-file-given-to-validate"),
])
def test_bad_emulator_options_are_one_line_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_the_library_logs_and_only_the_cli_shows_it_at_the_level_asked(tmp_path, capsys, monkeypatch):
    """k3lib installs no handler; `k3 -v`/`-vv` or K3_LOG_LEVEL show its records on stderr; a bad level is one
    line, exit 2."""
    import logging

    from k3lib.cli import verbosity

    logger = logging.getLogger("k3lib.test")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    monkeypatch.delenv(verbosity.LOG_LEVEL_ENV, raising=False)
    try:
        assert main(["inspect", "auto", str(empty)]) == 2
        logger.info("not shown at the default level")
        assert main(["-vv", "inspect", "auto", str(empty)]) == 2
        logger.debug("shown with -vv")
        monkeypatch.setenv(verbosity.LOG_LEVEL_ENV, "error")
        assert main(["inspect", "auto", str(empty)]) == 2
        logger.warning("not shown at ERROR")
        err = capsys.readouterr().err
        assert "k3 DEBUG k3lib.test: shown with -vv" in err and "not shown" not in err
        monkeypatch.setenv(verbosity.LOG_LEVEL_ENV, "loud")
        assert main(["inspect", "auto", str(empty)]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            "k3: K3_LOG_LEVEL: 'loud' is not a log level (DEBUG, INFO, WARNING, ERROR or a number)"]
    finally:
        k3 = logging.getLogger("k3lib")
        for handler in list(k3.handlers):
            k3.removeHandler(handler)
        k3.setLevel(logging.NOTSET)


def test_importing_the_library_installs_no_log_handler():
    code = "import logging, k3lib, k3lib.batch.execute, k3lib.io.gpu; print(logging.getLogger('k3lib').handlers)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
