"""The compatibility chain's configuration: the `recipe` section (what the chain is compared with: vLLM range, CUDA
major, driver branch, flags, image, build method) and `axes.environment` (where each artifact is read from, the GPUs
required, NVSwitch), both validated with the whole parameter file in `k3lib.core.params`; plus the chain's fixed
settings."""

from __future__ import annotations

from ...core.params import EnvironmentParams, RecipeParams

__all__ = ["EnvironmentParams", "OFFICIAL_REPOS", "RecipeParams", "STARTUP_LINES_QUOTED"]

# Docker Hub's official vLLM server image (any registry mirror): an image from elsewhere is a custom build.
OFFICIAL_REPOS: tuple[str, ...] = ("vllm/vllm-openai",)
# Startup-log lines quoted in a finding's message; the rest are counted.
STARTUP_LINES_QUOTED = 3
