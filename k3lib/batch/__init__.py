"""The batch layer both batches (acceptance, renewal review) stand on.

`k3lib.batch.execute` runs a plan's notebooks (`k3lib.core.plan.BatchPlan`) with papermill stage by stage, one progress
line each, a failing notebook recorded as a failing axis; then reads the summary's decision back and writes the
report. The run folder a notebook opens and the axis record it writes are shared in `k3lib.core.session`
(`open_run_folder`, `write_record`, `adopt_folder`), which both batches' sessions call.

What each batch adds on top stays with it: `k3lib.batch.acceptance` the target, its recovery between stages and the
acceptance rules; `k3lib.batch.renewal` the demo inputs and the renewal rules. This package imports nothing on
import, so that using one part never loads the rest.
"""
