"""A record of how the training-row check was made (not a tool): python index_vs_decoys.py RUN_DIR [split]
Samples 6 stage-2 batches of 8 (generator seeds 100-105) from the run's own stage-2 data and counts the recall rows
(with other records) whose queried record holds the token index's largest match among the records' tokens."""
import sys, torch
from mc.build import load_run
from mc.train.common import make_sampler
from mc.nets.token_index import training_match
from mc.data.hf_tokenizer import tokenizer_for
ctrl, tok = load_run(sys.argv[1])
cfg = ctrl.cfg; mc = cfg.mc
sm = make_sampler(cfg, sys.argv[2] if len(sys.argv) > 2 else "train", mc.history_tokens)
hit = n = 0
for it in range(6):
    b = sm.sample(8, mc.history_tokens, torch.Generator().manual_seed(100 + it))
    with torch.no_grad():
        emb = ctrl.base.embed(b.tokens)
        qe = torch.tensor([e if e is not None else b.tokens.shape[1] for e in b.query_ends()])
        _, m = training_match(ctrl.lensnet.index, emb, torch.zeros(1, 1, dtype=torch.long), qe, mc)
    for r in range(8):
        if not b.is_recall[r]: continue
        rs, re_ = int(b.record_start[r]), int(b.record_end[r])
        others = b.other_record_spans()[r]
        if not others: continue
        q = float(m[r, rs:re_].max()); d = max(float(m[r, a:c].max()) for a, c in others)  # spans are [start, end)
        hit += q > d; n += 1
print(f"queried record beats its decoys in {hit}/{n} training rows")
