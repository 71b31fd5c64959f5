"""Does the frozen base's own attention tell the queried sentence record from the other records?

For each (layer, head) of SmolLM2 the attention from the question's last ``NQ`` tokens is averaged; a record counts as
ranked first when the head gives it more than every other record. Two readings of the same documents (validation
split of the corpus filler, sentence records as in stage 2, one queried):
- ``raw``: the base over the whole document's prompt (256 tokens), attention summed over each record's tokens;
- ``gist``: the base over the session's compressed working context at budget W, the highest attention on a gist
  covering each record (a record raw in the recent tail leaves the document out), and LensNet's scores the same way;
  ``gist_untied`` the same over the documents whose records lie under no shared gist (a shared gist ties them).
Heads are picked on documents 777000.. (``select``) and read on 888000.. (``test``), so a head's test share is not
chosen on its own documents. Usage (repository root, PYTHONPATH=.):
    python probe.py RUN_DIR N_RECORDS W N_DOCS OUT_JSON
"""
import copy
import json
import sys

import torch

from mc.build import load_run
from mc.data.loader import corpus_haystack
from mc.data.sentence_recall import make_sentence_doc
from mc.eval.task_suite import at_budget

NQ = 12
torch.set_grad_enabled(False)
run, n_rec, W, N, out_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ctrl, tok = load_run(run)
cfg = copy.deepcopy(ctrl.cfg)
if W != cfg.mc.max_entries:
    cfg.eval.tasks.budget = W
    ctrl, cfg = at_budget(ctrl, cfg)
base = ctrl.base
for layer in base.layers:  # eager attention returns the probabilities the hooks read
    layer.self_attn.config._attn_implementation = "eager"
caught = []
for layer in base.layers:
    layer.self_attn.register_forward_hook(lambda m, i, o: caught.append(o[1][0].float()))
hay = corpus_haystack(cfg.data, "val", tokenizer=tok)
rc = copy.deepcopy(cfg.data.recall)
rc.n_records = n_rec


def first(per_lhr, answer):
    """[L, H, R] -> [L, H] 1.0 where the queried record's value is above every other's."""
    other = per_lhr.clone()
    other[..., answer] = -float("inf")
    return (per_lhr[..., answer] > other.max(-1).values).float()


def read(seed0):
    raw, gist, lens, shared = [], [], [], []
    for k in range(N):
        doc = make_sentence_doc(rc, seed0 + k, tok, hay)
        prompt = doc.ids[: doc.answer_span[0]]
        caught.clear()
        base(torch.as_tensor(prompt)[None])
        att = torch.stack(caught)[:, :, -NQ:, :].mean(2)  # [L, H, T]
        raw.append(first(torch.stack([att[:, :, a:b].sum(-1) for a, b in doc.record_spans], -1), doc.answer_record))
        s = ctrl.begin_session(torch.as_tensor(prompt))
        m = s.materialize()
        n = m.length
        lods = torch.tensor(s.wc.lods())
        overs = [(s.wc.overlap_mask(a, b) > 0) & (lods > 0) for a, b in doc.record_spans]
        if not all(o.any() for o in overs):
            continue
        caught.clear()
        ctrl.base_logits(m.embeds[None, :n], m.positions[None, :n], m.lods[None, :n], m.mask[None, :n])
        att = torch.stack(caught)[:, :, -NQ:, :].mean(2)  # [L, H, n]
        shared.append(bool((overs[0] & overs[1]).any()) if n_rec == 2 else any(
            bool((a & b).any()) for i, a in enumerate(overs) for b in overs[i + 1:]))
        gist.append(first(torch.stack([att[:, :, o].max(-1).values for o in overs], -1), doc.answer_record))
        sc = ctrl.lensnet_scores(m, s.num_tokens)[:n].cpu()
        lens.append(first(torch.stack([sc[o].max() for o in overs])[None, None], doc.answer_record)[0, 0])
    return torch.stack(raw), torch.stack(gist), torch.stack(lens), torch.tensor(shared)


sel, test = read(777_000), read(888_000)
res = {"run": run, "n_records": n_rec, "W": W, "docs": N, "chance": 1 / n_rec}
for i, name in enumerate(("raw", "gist")):
    share_sel, share_test = sel[i].mean(0), test[i].mean(0)  # [L, H]
    best = int(share_sel.flatten().argmax())
    H = share_sel.shape[1]
    res[name] = {"docs_select": len(sel[i]), "docs_test": len(test[i]), "best_head": [best // H, best % H],
                 "best_select": float(share_sel.flatten()[best]), "best_test": float(share_test.flatten()[best]),
                 "mean_over_heads_test": float(share_test.mean()),
                 "heads_test_at_least_0.8": int((share_test >= 0.8).sum())}
res["lensnet"] = {"select": float(sel[2].mean()), "test": float(test[2].mean())}
# Records under one shared gist tie in the gist reading (not wins): the same shares over the documents without one.
keep_sel, keep_test = ~sel[3], ~test[3]
g_sel, g_test = sel[1][keep_sel].mean(0), test[1][keep_test].mean(0)
best = int(g_sel.flatten().argmax())
H = g_sel.shape[1]
res["gist_untied"] = {"docs_select": int(keep_sel.sum()), "docs_test": int(keep_test.sum()),
                      "best_head": [best // H, best % H], "best_select": float(g_sel.flatten()[best]),
                      "best_test": float(g_test.flatten()[best]), "mean_over_heads_test": float(g_test.mean()),
                      "heads_test_at_least_0.8": int((g_test >= 0.8).sum()),
                      "lensnet_test": float(test[2][keep_test].mean())}
print(json.dumps(res))
json.dump(res, open(out_path, "w"), indent=1)
