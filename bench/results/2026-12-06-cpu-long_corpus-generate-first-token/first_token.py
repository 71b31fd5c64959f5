"""Does `generate` answer a question better when it refocuses before the first answer token (the behaviour since
7c895d0) than when the first token is drawn from the unrefocused layout and the refocus follows it (the behaviour
before, emulated here by starting `generate` one token short of a due refocus)? Sweep documents (the run's own
recall templates, corpus haystack) answered with `generate` both ways, greedy, scored exactly.

Usage (from the repository root): python first_token.py RUN_DIR DRAW [N_PER_CELL]"""
import sys
import time

import torch

from mc.build import load_run
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.long_tasks import make_long_doc
from mc.data.loader import corpus_haystack

run_dir, draw = sys.argv[1], int(sys.argv[2])
n_per_cell = int(sys.argv[3]) if len(sys.argv) > 3 else 8
ctrl, _ = load_run(run_dir, device=torch.device("cpu"))
cfg = ctrl.cfg
rc, w = cfg.data.recall, cfg.model.max_seq_len
tok = tokenizer_for(cfg.model)
hay = corpus_haystack(cfg.data, "val", tok)
interval = cfg.allocator.inference.refocus_interval
counts: dict = {}
t0 = time.time()
for task in ("passkey", "multi_needle"):
    for mult in (4, 16, 32):
        for depth in (0.1, 0.5, 0.9):
            for k in range(n_per_cell):
                seed = draw * 10_000 + k
                doc = make_long_doc(task, mult * w, depth, seed, key_len=rc.key_len, value_len=rc.value_len,
                                    n_needles=cfg.eval.long_range.n_needles, tokenizer=tok,
                                    template=rc.templates[k % len(rc.templates)], haystack=hay,
                                    near_decoys=rc.near_decoys, exclude=[rc.eval_template] if rc.eval_template else ())
                truth = doc.ids[-rc.value_len:].tolist()
                for way in ("before", "after"):
                    s = ctrl.begin_session(doc.ids[:-rc.value_len])
                    if way == "after":  # one token short of due: the first token is drawn, then the refocus
                        s.tokens_since_refocus = interval - 1
                    said = ctrl.generate(rc.value_len).tolist()
                    c = counts.setdefault((task, mult, way), [0, 0])
                    c[0] += said == truth
                    c[1] += 1
print(f"run {run_dir}, draw {draw}, {n_per_cell} documents a cell (depths 0.1, 0.5, 0.9), {time.time() - t0:.0f} s")
for (task, mult, way), (right, n) in sorted(counts.items()):
    print(f"{task:13s} {mult:3d}x  refocus {way:6s} the first token: {right:3d} of {n}")
