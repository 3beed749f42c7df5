"""Readers for the artifacts a real deployment produces: collect_env reports, nvidia-smi, vLLM logs, replies."""
