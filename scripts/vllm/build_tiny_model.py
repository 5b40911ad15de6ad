"""Build a tiny random-weight Llama model that a real vLLM can serve, entirely offline.

Run with the vLLM venv's python (it needs torch, transformers and tokenizers, which vLLM
brings along):

    .vllm-venv/bin/python scripts/vllm/build_tiny_model.py OUT_DIR

OUT_DIR receives config.json, model.safetensors, tokenizer.json, tokenizer_config.json (with
a chat template) and generation_config.json. The directory is written next to OUT_DIR first
and renamed into place, so a half-built model is never seen. Nothing is downloaded: the
weights are random (seeded) and the byte-level BPE tokenizer is trained on this Python's own
standard-library sources. The model says nothing sensible; it exists so that tests exercise
vLLM's real scheduler, KV cache, prefix cache, metrics and HTTP server in seconds on a CPU.

Callers cache the result under a key derived from this file's hash (tests/real_vllm), so any
edit here produces a fresh model.
"""

from __future__ import annotations

import json
import shutil
import sys
import sysconfig
from pathlib import Path

SEED = 1234
VOCAB_SIZE = 2048  # tokens; small so embedding and LM-head stay tiny
HIDDEN_SIZE = 128
INTERMEDIATE_SIZE = 256
NUM_LAYERS = 2
NUM_HEADS = 2  # head size 64: one of the CPU attention backend's supported head sizes
NUM_KV_HEADS = 2
MAX_POSITIONS = 4096  # tokens; becomes vLLM's default --max-model-len
CORPUS_BYTES = 3_000_000  # bytes of stdlib source used to train the tokenizer

BOS = "<|begin_of_text|>"
EOS = "<|end|>"
PAD = "<|pad|>"
# Plain jinja: a BOS, then each message as "<|role|>\ncontent<|end|>\n".
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def corpus_files() -> list[Path]:
    """Standard-library source files, in a fixed order, up to CORPUS_BYTES in total."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    chosen: list[Path] = []
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        size = path.stat().st_size
        if total + size > CORPUS_BYTES:
            continue
        chosen.append(path)
        total += size
    if total < 100_000:
        raise SystemExit(f"too little local text to train a tokenizer under {stdlib}")
    return chosen


def build_tokenizer(out: Path) -> int:
    """Train a byte-level BPE tokenizer locally, save it in transformers' layout.

    Returns the vocabulary size (tokens), special tokens included.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in corpus_files()]
    tokenizer.train_from_iterator(texts, trainer=trainer)

    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=MAX_POSITIONS,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(str(out))
    # Keep the chat template inside tokenizer_config.json as well: some loaders read only it.
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return tokenizer.get_vocab_size()


def build_model(out: Path, vocab_size: int, bos_id: int, eos_id: int, pad_id: int) -> None:
    """Save a seeded random-weight LlamaForCausalLM as float32 safetensors."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(str(out), safe_serialization=True)


def build(out: Path) -> Path:
    """Build the model into `out` (replaced atomically); returns `out`."""
    out = out.resolve()
    staging = out.with_name(out.name + ".building")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    vocab_size = build_tokenizer(staging)
    vocab = json.loads((staging / "tokenizer.json").read_text())["model"]["vocab"]
    build_model(staging, vocab_size, vocab[BOS], vocab[EOS], vocab[PAD])
    check(staging)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def check(model_dir: Path) -> None:
    """Load the tokenizer back and render the chat template, as vLLM will."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "hello"}], add_generation_prompt=True, tokenize=True
    )
    if not ids:
        raise SystemExit("the built tokenizer renders an empty chat prompt")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        if not (model_dir / name).is_file():
            raise SystemExit(f"the built model lacks {name}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUT_DIR", file=sys.stderr)
        return 2
    print(build(Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
