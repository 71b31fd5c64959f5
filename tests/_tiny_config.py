"""A tiny but complete config as Hydra overrides, shared by the harness and workflow tests."""

# Tiny but complete: 2 LOD levels, 2 WC buckets, 2 gist buckets, B=1 with 2 variants.
TINY = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=64",
        "gistnet.d_model=16", "gistnet.n_layers=1", "gistnet.n_heads=2",
        "lensnet.d_model=16", "lensnet.n_layers=1", "lensnet.n_heads=2",
        "mc.block_size=4", "mc.max_lod=2", "mc.max_entries=32", "mc.recent_tokens=8",
        "mc.bucket_ladder=[16,32]", "mc.gist_bucket_ladder=[1,4]", "mc.history_tokens=64",
        "mc.n_random_variants=1", "train.stage2.batch_size=1", "allocator.inference.refocus_interval=4",
        "eval.tail_tokens=8", "train.device=cpu"]
