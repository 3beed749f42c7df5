"""The compatibility chain's fixed settings. Its sections of the parameters, `recipe` (what the chain is compared
with: vLLM range, CUDA major, driver branch, flags, image, build method) and `axes.environment` (where each artifact is
read from, the GPUs required, NVSwitch), are declared once in `k3lib.core.params`, where the whole parameters file is
validated, and read from there."""

from __future__ import annotations

# Docker Hub's official vLLM server image (any registry mirror): an image from elsewhere is a custom build.
OFFICIAL_REPOS: tuple[str, ...] = ("vllm/vllm-openai",)
# Startup-log lines quoted in a finding's message; the rest are counted.
STARTUP_LINES_QUOTED = 3
