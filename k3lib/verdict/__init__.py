"""Records in, a decision out: the decision table, the evidence sheet, the accepted run and the post-run
judgements against it (`baseline`, `golive`). Stands on the axes and below."""
