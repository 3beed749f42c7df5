"""Talking to a target and reading what it says: the chat client, load generation and its calibration,
/metrics, GPU sources, the samplers of one run and the readers of pasted artifacts. Stands on `core` only."""
