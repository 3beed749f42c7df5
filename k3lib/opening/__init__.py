"""What a notebook opens first: its parameters, its run folder, its target (reached, or the embedded emulator
started) and its views.

The openers stand above the report, whose display set-up they install (`k3lib.report.views`), so neither the data
model nor the axes import the presentation; nothing below imports them. `axis` opens an acceptance axis notebook
(`k3lib.open_axis`, `k3lib.open_summary`); `review` is the review notebooks' calls (`k3lib.review`), whose context
and drill are the renewal review's own (`k3lib.renewal.notebook`)."""
