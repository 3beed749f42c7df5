#!/usr/bin/env bash
# Create .venv-peer/ with a peer load client (NVIDIA AIPerf, pinned), kept apart from the kit's .venv so that
# neither's dependencies bend the other's, plus .venv-peer/byte-tokenizer/: a one-byte-per-token tokenizer made
# here, so that AIPerf (which needs a tokenizer to synthesise prompts) never reaches a model hub at run time.
# Used by benchmarks/client_vs_peer.py.
#
#     bash benchmarks/setup_peer.sh            # idempotent; PEER_SPEC=aiperf==X.Y.Z to try another release
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
PEER=${PEER_SPEC:-aiperf==0.13.0}
if [ ! -x .venv-peer/bin/python ]; then
    "$PY" -m venv .venv-peer
    .venv-peer/bin/python -m pip install --quiet --upgrade pip
fi
.venv-peer/bin/python -m pip install --quiet "$PEER"
if [ ! -f .venv-peer/byte-tokenizer/tokenizer.json ]; then
    .venv-peer/bin/python - .venv-peer/byte-tokenizer <<'PY'
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

# byte-level BPE without merges: 256 tokens, one per byte; nothing to download
vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(sys.argv[1])
PY
fi
echo "peer ready: .venv-peer/bin/aiperf $(.venv-peer/bin/aiperf --version 2>/dev/null | tail -1), tokenizer .venv-peer/byte-tokenizer"
