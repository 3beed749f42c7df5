"""What a person reads: the notebooks' openers and HTML views, the summary, the reviewer's report pages,
the nightly history, the explorer, and the signature over them."""
