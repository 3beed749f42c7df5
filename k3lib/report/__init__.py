"""What a person reads: the HTML views, the summary, the review's tables and figures, the reviewer's report pages,
the nightly history, the explorer, and the signature over them. The notebooks' openers, which install the views,
are `k3lib.opening`."""
