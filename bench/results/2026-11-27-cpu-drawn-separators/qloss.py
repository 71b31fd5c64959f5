import json, sys, dataclasses, collections, torch, torch.nn.functional as F
from mc.config_loading import load_config
from mc.build import build_nets, load_base_weights
from mc.data.loader import corpus_haystack
from mc.data.recall import make_shifted_recall_doc, fit_recall
run = sys.argv[1]
cfg = load_config(["preset=long_corpus"])
base, _, _ = build_nets(cfg, torch.device("cpu")); load_base_weights(base, f"{run}/stage1/base.pt"); base.eval()
hay = corpus_haystack(cfg.data, "val")
rc = dataclasses.replace(cfg.data.recall, doc_tokens=128)
by = collections.defaultdict(list)
for i in range(300):
    d = make_shifted_recall_doc(rc, 700000 + i, 128, rc.stage1_min_tokens, haystack=hay)
    with torch.no_grad():
        lg = base(d.ids[None])[0]
    nll = F.cross_entropy(lg[:-1], d.ids[1:], reduction="none")
    q0, a1 = d.query_start, d.answer_span[1]
    kind = "fixed" if d.template in cfg.data.recall.templates else "drawn"
    for t in range(q0, a1):
        off = t - q0
        part = "key" if off < len(d.keys[d.answer_record]) else ("ans" if t >= d.answer_span[0] else "sep")
        by[(kind, part)].append(float(nll[t - 1]))
        by[(kind, "all")].append(float(nll[t - 1]))
for k in sorted(by):
    v = by[k]; print(k, len(v), "mean %.3f" % (sum(v) / len(v)), "max %.2f" % max(v), ">1: %d" % sum(x > 1 for x in v))
