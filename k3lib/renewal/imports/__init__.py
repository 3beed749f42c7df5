"""`k3 import`: a team's own records (bills, incidents, worklogs, API usage) as the review's input files, each with
a provenance header; nothing the records do not say is invented."""

from .commands import import_bill, import_incidents, import_usage, import_worklogs, window_of
from .params import ImportParams, load_import_params
from .provenance import Provenance, ReviewWindow

__all__ = ["ImportParams", "Provenance", "Window", "import_bill", "import_incidents", "import_usage",
           "import_worklogs", "load_import_params", "window_of"]
