#!/usr/bin/env bash
# Create .venv-peer/ with a peer load client (NVIDIA AIPerf, pinned), kept apart from the kit's .venv so that
# neither's dependencies bend the other's. Used by benchmarks/client_vs_peer.py.
#
#     bash benchmarks/setup_peer.sh            # idempotent: re-running with the venv present only checks it
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
PEER=${PEER_SPEC:-aiperf==0.13.0}
if [ ! -x .venv-peer/bin/python ]; then
    "$PY" -m venv .venv-peer
    .venv-peer/bin/python -m pip install --quiet --upgrade pip
fi
.venv-peer/bin/python -m pip install --quiet "$PEER"
.venv-peer/bin/aiperf --version 2>/dev/null || .venv-peer/bin/python -m pip show aiperf | head -2
echo "peer ready: .venv-peer/bin/aiperf"
