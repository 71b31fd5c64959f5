"""How the second-question fix was chosen (validation draw, not the record's): a session's second question (see
second_question.py; sweep documents A then B, 4 sessions a cell, 4x and 16x, depths 0.1 / 0.5 / 0.9) read four ways:
  unfixed  the question's refocus not scheduled, no relayout (the first change alone);
  clock    the same after advancing the cooldown clock by the refocus intervals the prompt spanned (one fix tried);
  rebuild  the same after giving the session a new session's layout and allocator (the fix kept, as
           InferenceSession.relayout_after_prompt does it);
  fresh    a new session over A (with its true value) and B.

Usage (from the repository root): python choose_fix.py RUN_DIR DRAW [N_PER_CELL]"""
import collections
import sys

import torch

from mc.allocator import FocusAllocator
from mc.build import load_run
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.long_tasks import make_long_doc
from mc.data.loader import corpus_haystack
from mc.working_context import WorkingContext

run_dir, draw = sys.argv[1], int(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 4
ctrl, _ = load_run(run_dir, device=torch.device("cpu"))
cfg = ctrl.cfg
rc, w, mc, v = cfg.data.recall, cfg.model.max_seq_len, cfg.mc, cfg.data.recall.value_len
interval = cfg.allocator.inference.refocus_interval
tok = tokenizer_for(cfg.model)
hay = corpus_haystack(cfg.data, "val", tok)


def doc(task, mult, depth, seed, k):
    return make_long_doc(task, mult * w, depth, seed, key_len=rc.key_len, value_len=v,
                         n_needles=cfg.eval.long_range.n_needles, tokenizer=tok,
                         template=rc.templates[k % len(rc.templates)], haystack=hay, near_decoys=rc.near_decoys,
                         exclude=[rc.eval_template])


res = collections.Counter()
for task in ("passkey", "multi_needle"):
    for mult in (4, 16):
        for depth in (0.1, 0.5, 0.9):
            for k in range(n):
                a = doc(task, mult, depth, draw * 10_000 + k, k)
                b = doc(task, mult, depth, draw * 10_000 + 5000 + k, k + 1)
                for way in ("unfixed", "clock", "rebuild", "fresh"):
                    if way == "fresh":
                        s = ctrl.begin_session(torch.cat([a.ids, b.ids[:-v]]))
                    else:
                        s = ctrl.begin_session(a.ids[:-v])
                        ctrl.generate(v)
                        ctrl.append(b.ids[:-v], refocus=False)
                        s.relayout_after_prompt = lambda: False  # the code before the fix: no relayout
                    if way == "clock":
                        s.allocator.clock += s.tokens_since_refocus // interval - 1
                    if way == "rebuild":
                        s.wc = WorkingContext.build(s.num_tokens, fill=True, block_size=mc.block_size,
                                                    max_lod=s.tree.max_lod, max_entries=mc.max_entries,
                                                    recent_tokens=mc.recent_tokens)
                        s.allocator, s.check = FocusAllocator(cfg.allocator), None
                    res[(task, mult, way)] += ctrl.generate(v).tolist() == b.ids[-v:].tolist()
print(f"run {run_dir}, draw {draw}, {n} sessions a cell (depths 0.1, 0.5, 0.9)")
for key in sorted(res):
    print(*key, res[key], "of", 3 * n)
