"""Regenerate the notebooks from this one description: run from the repository root."""
import nbformat
from nbformat.v4 import new_notebook, new_code_cell, new_markdown_cell

def nb(path, title, intro, cells, params_extra=""):
    params = ('params_file = "parameters/emulator.yaml"  # YAML parameters, or a run\'s resolved params.json\n'
              'overrides = []  # overrides in `k3 --set` syntax, applied after the file\n'
              'run_dir = ""  # empty: a new folder under outputs/\n'
              'interactive = False  # True in JupyterLab to get widgets; batch runs pass False\n' + params_extra)
    c = [new_markdown_cell(f"# {title}\n\n{intro}"), new_code_cell(params, metadata={"tags": ["parameters"]})]
    for kind, src in cells:
        c.append(new_markdown_cell(src) if kind == "md" else new_code_cell(src))
    n = new_notebook(cells=c, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                                         "language_info": {"name": "python"}})
    nbformat.write(n, path)

nb("notebooks/00_probe.ipynb", "Target probe",
   "Is there an OpenAI-compatible server at the target, which model does it serve, with which context limit, "
   "and does it expose engine metrics? Each endpoint's status, latency and body are kept as evidence.",
   [("code", "import k3lib\n\nctx = k3lib.open_axis(\"probe\", params_file, overrides, run_dir, interactive)\nctx"),
    ("code", "probe = k3lib.run_probe(ctx)\nprobe.table()"),
    ("code", "probe.figure()"),
    ("code", "ctx.record(k3lib.probe_record(probe, ctx))")])

nb("notebooks/99_acceptance.ipynb", "Acceptance summary",
   "Reads the evidence records of this run only — never the other notebooks — and shows the checklist and "
   "the decision with the reasons that produced it.",
   [("code", "import k3lib\n\nparams, store = k3lib.open_summary(params_file, overrides, run_dir)\nstore.root"),
    ("code", "records = k3lib.read_records(store)\nk3lib.records_table(records)"),
    ("code", "k3lib.decide_run(params, store, records)"),
    ("code", "k3lib.findings_table(records)")])
