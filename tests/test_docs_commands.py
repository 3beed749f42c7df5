"""Every `k3 …` command the README and docs/ show in a fenced block is one the real parser takes, and the
walkthrough of docs/first-run.md runs end to end against the emulator, its commands read from the page itself."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from chromium import needs_chromium
from conftest import needs_tool
from k3lib.cli.main import build_parser, main
from k3lib.core.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_K3 = re.compile(r"\s*(?:\$ )?(?:\.venv/bin/)?k3 (.*)")


def fenced_commands(doc: Path) -> list[tuple[int, list[str]]]:
    """(line number, argv after `k3`) of each `k3 …` line in the page's fenced blocks, a trailing backslash
    joining the next line, a `#` comment dropped."""
    out, fenced, held = [], False, ""
    for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced, held = not fenced, ""
            continue
        if not fenced:
            continue
        line = f"{held} {line.strip()}" if held else line
        if line.rstrip().endswith("\\"):
            held = line.rstrip()[:-1]
            continue
        held = ""
        found = _K3.match(line)
        if found:
            out.append((n, shlex.split(found.group(1), comments=True)))
    return out


COMMANDS = [(doc, n, argv) for doc in DOCS for n, argv in fenced_commands(doc)]


def test_the_docs_show_commands():
    shown = {(doc.name, argv[0]) for doc, _, argv in COMMANDS}
    assert {("README.md", "sign"), ("first-run.md", "init"), ("renewal.md", "import"), ("cli.md", "validate")} <= shown


@pytest.mark.parametrize("doc, line, argv", COMMANDS,
                         ids=[f"{doc.name}:{n}" for doc, n, _ in COMMANDS])
def test_each_fenced_command_is_taken_by_the_parser(doc, line, argv):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        assert not exc.code, f"{doc.name}:{line}: k3 {shlex.join(argv)}: {err.getvalue().strip()}"


def _walkthrough() -> list[list[str]]:
    return [argv for _, argv in fenced_commands(ROOT / "docs" / "first-run.md")]


def test_the_walkthrough_is_the_readme_s():
    """The README's steps are the walkthrough's, command for command (the walkthrough test runs them)."""
    readme = [argv for _, argv in fenced_commands(ROOT / "README.md") if argv[0] not in ("import", "review")]
    assert readme == _walkthrough()


@needs_chromium
@needs_tool(shutil.which("pdftotext") is not None, "poppler's pdftotext (apt package poppler-utils), installed by .ci/run")
@needs_tool(shutil.which("ssh-keygen") is not None, "ssh-keygen (openssh-client), installed by .ci/run")
def test_the_first_run_walkthrough_runs_against_the_emulator(healthy_run, emulator, tmp_path, capsys,
                                                             monkeypatch):
    """docs/first-run.md's commands, as written there, with its placeholders filled in: the server is the session's
    emulator, the key a file made here, RUN a copy of the session's healthy run (the batch `k3 validate -p` starts,
    run once per session on the same emulator profile: not run twice)."""
    monkeypatch.setenv("VLLM_API_KEY", "any-key")  # the emulator asks none; the variable is named, so it is set
    monkeypatch.chdir(tmp_path)
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "camille", "-f", str(key)], check=True)
    shutil.copytree(healthy_run[1].root, tmp_path / "RUN")
    pub = key.with_suffix(".pub").read_text().split()
    (tmp_path / "allowed_signers").write_text(f'"Camille Durand" {pub[0]} {pub[1]}\n')
    fill = {"http://vllm-k3.internal:8000": emulator.url, "~/.ssh/id_ed25519": str(key)}
    ran = []
    for argv in _walkthrough():
        argv = [fill.get(a, a) for a in argv]
        if argv[:3] == ["validate", "-p", "my-k3.yaml"] and len(argv) == 3:
            continue  # the batch itself: healthy_run
        if argv[0] == "sign":
            # the walkthrough's target here is the kit's emulator: a demo, which `k3 sign` refuses without --demo
            # (tests/test_demo_not_production.py); a real deployment's run signs as written
            assert main(argv) == 2 and "is a demo" in capsys.readouterr().err
            argv = [*argv, "--demo"]
        code = main(argv)
        said = capsys.readouterr()
        assert code == 0, f"k3 {shlex.join(argv)}: exit {code}: {said.err.strip()[-400:]}"
        ran.append(argv[0])
    assert ran == ["init", "validate", "report", "sign", "verify", "golive"]
    store = RunStore(tmp_path / "RUN")
    assert store.read_json("signature.json")["reviewer"] == "Camille Durand"
    assert (tmp_path / "RUN" / "acceptance.pdf").is_file() and any((tmp_path / "golive").iterdir())
    _every_reason_whole_in_the_pdf(store, tmp_path / "RUN" / "acceptance.pdf")


def _every_reason_whole_in_the_pdf(store: RunStore, pdf: Path) -> None:
    """The PDF a reviewer signs, read back by poppler: every reason of the decision and every sheet item's observed
    text is there whole (compared without white space and hyphens, which a wrapped line breaks or pdftotext drops
    at a line's end), and no cell is cut with "…"."""
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True,
                          timeout=120).stdout
    flat = _squeezed(text)
    decision = store.read_json("decision.json")
    said = [*decision["reasons"], *(item["observed"] for item in decision["checklist"])]
    assert said and all(_squeezed(s) in flat for s in said), [s[:80] for s in said if _squeezed(s) not in flat]
    cut = [m for m in re.findall(r"(\S+)…", text) if not re.fullmatch(r".*[0-9a-f]{3,}", m)]  # a digest, maybe split
    assert not cut, f"only a digest is shortened with …, not {cut[:5]}"
    css = (store.root / "report" / "k3report.css").read_text()
    assert "break-inside: avoid" in css and "overflow-wrap: anywhere" in css  # plots whole, reasons wrapped


def _squeezed(text: str) -> str:
    return re.sub(r"[\s\-]+", "", text)
