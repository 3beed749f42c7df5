"""Build the tiny random-weight Llama that real vLLM serves on CPU here (no model hub is reachable).

Usage: python scripts/vllm_tiny_model.py OUT_DIR   (run with the vLLM environment's python: it needs torch,
transformers and tokenizers, which vLLM brings)

Deterministic: the training text is generated from a fixed seed, the byte-level BPE is trained on it, and the
weights are drawn after torch.manual_seed; the same versions give the same files. The model is meant to exercise
the serving stack (tokenizer, chat template with tools, the hermes tool parser's <tool_call> tokens, the KV cache,
the scheduler), not to say anything sensible: its replies are random tokens.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 20261201
VOCAB_SIZE = 8192
HIDDEN = 256
LAYERS = 2
HEADS = 4
INTERMEDIATE = 688
MAX_POSITIONS = 4096
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Normal (not special) tokens: the hermes parser looks them up in the vocabulary and they must survive decoding.
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]

_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so no will more can out up what about who "
    "time request token model server cache prefix block queue latency memory engine context window tool call "
    "function weather city temperature search result answer question user assistant system message reply json "
    "name arguments value number list table file report check pass fail open close start stop ready health "
    "metrics version tokenize completion chat stream usage prompt output input length limit error kernel gpu "
    "cpu batch concurrency throughput decode prefill schedule preempt wait run finish reason deploy cluster node"
).split()


def corpus(seed: int = SEED, lines: int = 12000) -> list[str]:
    """English-like lines from a fixed word list plus seeded pseudo-words, numbers and JSON fragments."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "so", "vi", "de", "po", "ze", "an", "or", "el", "us", "it"]
    pseudo = ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(3000)]
    out = []
    for _ in range(lines):
        words = [rng.choice(_WORDS) if rng.random() < 0.7 else rng.choice(pseudo) for _ in range(rng.randint(6, 24))]
        if rng.random() < 0.15:
            words.append(json.dumps({"name": rng.choice(pseudo), "arguments": {"city": rng.choice(pseudo),
                                                                             "days": rng.randint(1, 99)}}))
        if rng.random() < 0.2:
            words.append(str(rng.randint(0, 100000)))
        line = " ".join(words)
        out.append(line[0].upper() + line[1:] + rng.choice([".", "?", "!", ":", ","]))
    return out


# Qwen-style turns with a hermes tools section: what `--tool-call-parser hermes` expects the model to answer.
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{%- if messages and messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "You may call one or more functions. Function signatures are inside <tools></tools>:\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    "For each call, return a JSON object with the function name and arguments inside <tool_call></tool_call>."
    "<|im_end|>\n"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if tools and loop.first and message.role == 'system' %}{%- continue %}{% endif %}"
    "{%- if message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response>"
    "<|im_end|>\n"
    "{%- elif message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n"
    "{%- if message.content %}{{ message.content }}\n{% endif %}"
    "{%- for call in message.tool_calls %}<tool_call>\n"
    "{\"name\": \"{{ call.function.name }}\", \"arguments\": "
    "{%- if call.function.arguments is string %}{{ call.function.arguments }}"
    "{%- else %}{{ call.function.arguments | tojson }}{% endif %}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n"
    "{%- if message.content is string %}{{ message.content }}"
    "{%- elif message.content %}{% for part in message.content %}{% if part.type == 'text' %}{{ part.text }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build(out_dir: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE - len(TOOL_TOKENS), special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_tokens(TOOL_TOKENS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None, model_max_length=MAX_POSITIONS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)

    torch.manual_seed(SEED)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                         max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=True,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, torch_dtype="float32")
    model = LlamaForCausalLM(config)
    model.save_pretrained(out_dir, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"tiny model: {params / 1e6:.2f}M parameters, vocabulary {len(fast)}, written to {out_dir}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.splitlines()[2])
    build(Path(sys.argv[1]))
