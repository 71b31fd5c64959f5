"""Write a tiny, randomly initialised Hugging Face causal LM + tokenizer directory (no download).

    python scripts/make_tiny_hf.py --family llama|qwen2|mistral --out DIR [--hidden 64 --layers 2 --seed 0]

The directory has the ``save_pretrained`` layout (config.json, model.safetensors, tokenizer.json,
tokenizer_config.json), so ``model=hf model.hf_path=DIR`` loads it through the same code as a real
checkpoint. The tokenizer is a byte-level BPE trained here on a few built-in strings (every byte is
in its alphabet, so any text encodes), with ``<bos>``, ``<eos>`` and ``<pad>`` specials. The weights
are random: the point is to exercise the loading and adapter path, not to produce a useful model.
See obsidian Base models.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

FAMILIES = ("llama", "qwen2", "mistral")
SPECIALS = ("<bos>", "<eos>", "<pad>")
# Training text for the BPE merges: words, digits, uppercase keys and "KEY=VALUE" records, the
# kinds of strings the project's data and generated tasks contain.
_CORPUS = [
    "the quick brown fox jumps over the lazy dog. the pass key is 12345. remember it.",
    "AB=123\nCD=456\nEF=789\nthe record KEY=VALUE sits far back in the document.",
    "def main():\n    return 0\nimport os, sys\nclass Tree:\n    pass\n",
    "which one all were when we there can had more if will each about how up out them",
    "0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz .,;:!?=()[]{}",
]


def build_tokenizer(vocab_size: int):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with the three specials (ids 0, 1, 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")


def build_config(family: str, vocab_size: int, hidden: int, layers: int, heads: int, kv_heads: int,
                 max_positions: int, rope_theta: float, init_std: float, ids: dict):
    import transformers as tf

    common = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                  rope_parameters={"rope_type": "default", "rope_theta": rope_theta}, tie_word_embeddings=False,
                  initializer_range=init_std, **ids)
    if family == "llama":
        return tf.LlamaConfig(**common)
    if family == "qwen2":
        return tf.Qwen2Config(**common)
    # The working context is far shorter than any window, so Mistral's sliding window never applies.
    return tf.MistralConfig(sliding_window=None, **common)


def make_tiny_hf(family: str, out: str | Path, *, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                 vocab_size: int = 384, max_positions: int = 4096, rope_theta: float = 10000.0, init_std: float = 0.02,
                 seed: int = 0) -> Path:
    """Write the directory and return its path; ValueError on an unknown family."""
    if family not in FAMILIES:
        raise ValueError(f"--family {family!r} is not supported; expected one of {', '.join(FAMILIES)}")
    import torch
    from transformers import AutoModelForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size)
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    # Rows to spare, as real checkpoints have: AutoTokenizer may add a family's own specials on load
    # (Qwen2's adds <|endoftext|>), and every id it can produce must have an embedding row.
    rows = -(-(len(tokenizer) + 8) // 64) * 64
    config = build_config(family, rows, hidden, layers, heads, kv_heads, max_positions, rope_theta, init_std, ids)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", required=True, choices=FAMILIES)
    p.add_argument("--out", required=True, help="directory to write (created)")
    p.add_argument("--hidden", type=int, default=64, help="hidden size (default 64)")
    p.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--kv-heads", type=int, default=2, help="key/value heads (grouped-query attention; default 2)")
    p.add_argument("--vocab", type=int, default=384, help="BPE vocabulary size (>= 259: 256 bytes + 3 specials)")
    p.add_argument("--init-std", type=float, default=0.02,
                   help="weight init std (larger makes attention, hence positions, matter more in a random model)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    out = make_tiny_hf(a.family, a.out, hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads,
                       vocab_size=a.vocab, init_std=a.init_std, seed=a.seed)
    print(f"wrote a tiny {a.family} model + tokenizer to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
