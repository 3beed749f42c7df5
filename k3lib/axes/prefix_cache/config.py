"""The prefix-cache axis' fixed settings. Its section of the parameters, `axes.prefix_cache` (sessions, prefix
lengths, isolation, the warm change, the block size override, the TTFT gain that counts, the bounds), is declared once
in `k3lib.core.params`, where the whole parameters file is validated, and read from there."""

from __future__ import annotations

#: Hit units seen in the wild: default 16, FlashMLA 64, Kimi-K3's prefix-match-unit 128, hybrid/Mamba inflations.
#: A gap between designed and observed hits that one of these reproduces exactly is named a block-size gap.
CANDIDATE_UNITS: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 528, 1024, 1536, 2048, 3584)
