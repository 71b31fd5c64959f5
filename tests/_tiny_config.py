"""The one tiny test config: Hydra overrides shared by every test that needs a whole (small) run config.

- :data:`TINY`: the harness and workflow tests pass these overrides to the CLIs / ``load_config``.
- :func:`tiny_config`: TINY plus :data:`SCENARIO` as a :class:`mc.config.RunConfig`, with one compile
  mode for both nets and both contexts: what the controller tests (tests/_compile_scenarios.py,
  tests/test_mc_components.py) build a controller from.
- :data:`D`, :data:`K`: TINY's model width and block size, for tests that build inputs by hand.
"""
from __future__ import annotations

D, K = 32, 4  # model.d_model and mc.block_size of TINY: blocks are [N, K, D], a working context [W, D]

# Tiny but complete: 2 LOD levels, 2 WC buckets, 2 gist buckets, B=1 with 2 variants.
TINY = [f"model.d_model={D}", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=64",
        "gistnet.d_model=16", "gistnet.n_layers=1", "gistnet.n_heads=2",
        "lensnet.d_model=16", "lensnet.n_layers=1", "lensnet.n_heads=2",
        f"mc.block_size={K}", "mc.max_lod=2", "mc.max_entries=32", "mc.recent_tokens=8",
        "mc.bucket_ladder=[16,32]", "mc.gist_bucket_ladder=[1,4]", "mc.history_tokens=64",
        "mc.n_random_variants=1", "train.stage2.batch_size=1", "allocator.inference.refocus_interval=4",
        "eval.tail_tokens=8", "train.device=cpu",
        "train.stage1.query_loss_target=0"]  # the default preset's copy gate off: a test's few stage-1 steps are all

# What the controller scenarios need on top of TINY: B=2 sequences x V=3 variants = 6 training rows
# (so a batch mix-up between rows shows), and a third gist bucket (16) so a 40-block GistNet call is
# chunked 16+16+8 and the held-output tests can call GistNet at three bucket sizes.
SCENARIO = ["train.stage2.batch_size=2", "mc.n_random_variants=2", "mc.gist_bucket_ladder=[1,4,16]",
            "telemetry.jsonl=false"]


def tiny_config(mode: str = "off", *, freeze: str = "fail"):
    """TINY + SCENARIO with compile ``mode`` for both nets in training and inference (``"off"``: eager)."""
    from mc.config_loading import load_config  # noqa: PLC0415 - TINY alone must not import Hydra

    compile_ = [f"compile.{net}.{ctx}={mode}" for net in ("lensnet", "gistnet") for ctx in ("train", "inference")]
    return load_config(TINY + SCENARIO + compile_ + [f"compile.freeze={freeze}"])
