"""Records in, a decision out: the decision table, the evidence sheet, the accepted run and the post-run
judgement against it (`baseline`; the go-live kit it feeds is `k3lib.golive`). Stands on the axes and below."""
