"""Which exact-token node score ranks the queried needle's node strictly first among its level's nodes? No nets.

    PYTHONPATH=. python bench/results/2026-12-04-cpu-smollm2_cpu-overlap/probe_node_scores.py multikey   # or passkey

Task-suite documents at 1024 and 2048 tokens (8x and 16x of W = 128), 12 per depth 0.1 / 0.5 / 0.9, seeds
900000 + k (no suite draw uses them: suite seeds start at 2,000,000). Scores over the question's last 32 tokens
(distinct ids), per level of K = 8: weight `idf` (log((n + 1) / (count + 0.5))) or `inv` (1 / count), pooled by
`max` (the lexical query), `sum`, or `dfsum` (the salience rule's idf over the level's nodes).
"""
import sys
import zlib

import torch

from mc.config_loading import load_config
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import make_source
from mc.data.real_tasks import make_task_doc, filler_window

cfg = load_config(["preset=smollm2_cpu"])
tok = tokenizer_for(cfg.model)
src = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
K, R = cfg.mc.block_size, cfg.mc.recent_tokens

def base(ids, qend, r, weight):
    t = ids.shape[0]
    query = ids[qend - r:qend]
    first = torch.tensor([not bool((query[:j] == query[j]).any()) for j in range(r)])
    before = torch.arange(t) < qend - r
    eq = (ids[:, None] == query[None]) & before[:, None] & first[None]  # [T, r] distinct query ids
    count = eq.sum(0).float()
    n = before.sum().float()
    if weight == "idf":
        w = torch.log((n + 1) / (count + 0.5)).clamp_min(0)
    else:
        w = torch.where(count > 0, 1.0 / count.clamp_min(1), torch.zeros_like(count))
    return eq, w

def node_scores(ids, qend, level, mode):
    weight, pool = mode.split("-")
    eq, w = base(ids, qend, R, weight)
    size = K ** level
    n = ids.shape[0] // size
    pres = eq[: n * size].reshape(n, size, -1).any(1).float()  # [N, r]
    if pool == "max":
        return (pres * w).amax(-1)
    if pool == "sum":
        return pres @ w
    if pool == "dfsum":  # salience-like: idf over this level's nodes
        nb = (torch.arange(n) * size < qend - R).float()
        df = pres.sum(0)
        w2 = torch.log((nb.sum() + 1) / (df + 0.5)).clamp_min(0)
        return pres @ w2

TASK = sys.argv[1]
modes = ["idf-max", "idf-sum", "inv-max", "inv-sum", "idf-dfsum"]
res = {(m, lv, L): [0, 0] for m in modes for lv in (1, 2) for L in (1024, 2048)}
for L in (1024, 2048):
    for depth in (0.1, 0.5, 0.9):
        for k in range(12):
            seed = 900000 + k
            cs = zlib.crc32(repr((TASK, L, depth, seed)).encode())
            doc = make_task_doc(TASK, L, depth, seed, tok, filler_window(src, L, cs), n_keys=4)
            ids, qend = doc.ids, doc.ids.shape[0]
            for lv in (1, 2):
                size = K ** lv
                for m in modes:
                    s = node_scores(ids, qend, lv, m)
                    def nodes(span):
                        a, b = span
                        return list(range(a // size, min((b - 1) // size + 1, s.shape[0])))
                    qn = nodes(doc.needle_spans[0])
                    best_q = max(float(s[i]) for i in qn)
                    # first among all nodes
                    top = float(s.max())
                    res[(m, lv, L)][0] += best_q >= top and sum(float(x) >= best_q for x in s) <= len(qn)
                    res[(m, lv, L)][1] += 1
for key, (a, b) in res.items():
    print(key, f"{a}/{b}")
