"""The commands that rewrite a run's or the repository's files from the code: `k3 report` and `k3 schemas`."""

from __future__ import annotations

import argparse

from ..axes.paths.record import write_schema as write_paths_schema
from ..core.evidence import write_schemas
from ..core.store import RunStore
from ..renewal.results import write_schemas as write_renewal_schemas
from ..report.index import rerender
from ..report.pages import REPORT_JSON
from ..report.pdf import print_pdf


def cmd_report(ns: argparse.Namespace) -> int:
    """`k3 report RUN [--pdf FILE]`: re-render the run's pages and index; with --pdf, print the archive copy."""
    store = RunStore.open(ns.run)
    if not ns.pdf or not store.path("report/index.html").is_file():
        print(f"report: {store.path(rerender(store))}")
    if ns.pdf:
        entry = print_pdf(store, ns.pdf)
        print(f"pdf: {entry['file']} ({entry['bytes']} bytes, sha256 {entry['sha256']}) recorded in "
              f"{store.path(REPORT_JSON)}")
    return 0


def cmd_schemas(ns: argparse.Namespace) -> int:
    """`k3 schemas`: rewrite the JSON Schemas in schemas/ from the code, one line per file written."""
    for path in [*write_schemas(), *write_renewal_schemas(), write_paths_schema()]:
        print(f"wrote {path}")
    return 0
