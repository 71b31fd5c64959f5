"""Probe: train GistNet so SmolLM2's retrieval heads attend to the queried record's gist as they attend to its raw
sentence; then re-read the held-out head shares (as probe.py) and the plain-text tail loss. Usage (repository root,
PYTHONPATH=.): python gist_attention_train.py RUN_DIR N_TRAIN EPOCHS LR [kl|pair]"""
import copy, json, sys, time, random
import torch
import torch.nn.functional as F
from mc.build import load_run
from mc.data.loader import corpus_haystack
from mc.data.sentence_recall import make_sentence_doc
from mc.eval.evaluate import corpus_eval_docs, wc_tail_loss, Focus

run, n_train, epochs, lr = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
MODE = sys.argv[5] if len(sys.argv) > 5 else "kl"
NQ = 12
torch.manual_seed(0)
ctrl, tok = load_run(run)
cfg = copy.deepcopy(ctrl.cfg)
base, gnet = ctrl.base, ctrl.gistnet
for layer in base.layers:
    layer.self_attn.config._attn_implementation = "eager"
caught = []
for layer in base.layers:
    layer.self_attn.register_forward_hook(lambda m, i, o: caught.append(o[1][0]))
rc = copy.deepcopy(cfg.data.recall); rc.n_records = 2
hay_tr = corpus_haystack(cfg.data, "train", tokenizer=tok)
hay_va = corpus_haystack(cfg.data, "val", tokenizer=tok)
K = cfg.mc.block_size


def doc_parts(doc):
    prompt = torch.as_tensor(doc.ids[: doc.answer_span[0]])
    with torch.no_grad():
        s = ctrl.begin_session(prompt)
        m = s.materialize()
    n = m.length
    ents = s.wc.entries
    spans = [s.wc.span(i) for i in range(n)]
    return prompt, s, m, n, ents, spans


def layout_embeds(prompt, ents):
    """[n, D] embeddings of the layout's entries with GistNet in the graph."""
    emb = base.embed(prompt[None])[0].float()  # [T, D]
    nb = emb.shape[0] // K
    l1 = gnet(emb[: nb * K].view(nb, K, -1))  # [nb, D]
    n2 = nb // K
    l2 = gnet(l1[: n2 * K].view(n2, K, -1)) if n2 else None
    rows = [emb[idx] if lod == 0 else (l1[idx] if lod == 1 else l2[idx]) for lod, idx in ents]
    return torch.stack(rows)


def teacher_heads(docs):
    """Heads whose raw attention ranks the queried record first in >= 80% of docs."""
    wins = 0
    for doc in docs:
        caught.clear()
        with torch.no_grad():
            base(torch.as_tensor(doc.ids[: doc.answer_span[0]])[None])
        att = torch.stack([c.float() for c in caught])[:, :, -NQ:, :].mean(2)  # [L, H, T]
        per = torch.stack([att[:, :, a:b].sum(-1) for a, b in doc.record_spans], -1)
        wins = wins + (per[..., doc.answer_record] > per[..., 1 - doc.answer_record]).float()
    share = wins / len(docs)
    return [(int(l), int(h)) for l, h in (share >= 0.8).nonzero().tolist()], share


def gist_share(docs, heads):
    """Held-out reading as probe.py's gist_untied: per head, share of untied docs with the queried record first."""
    wins, n_ok, lens_w = None, 0, 0
    for doc in docs:
        prompt, s, m, n, ents, spans = doc_parts(doc)
        lods = torch.tensor(s.wc.lods())
        overs = [(s.wc.overlap_mask(a, b) > 0) & (lods > 0) for a, b in doc.record_spans]
        if not all(o.any() for o in overs) or (overs[0] & overs[1]).any():
            continue
        caught.clear()
        with torch.no_grad():
            ctrl.base_logits(m.embeds[None, :n], m.positions[None, :n], m.lods[None, :n], m.mask[None, :n])
        att = torch.stack([c.float() for c in caught])[:, :, -NQ:, :].mean(2)
        per = torch.stack([att[:, :, o].max(-1).values for o in overs], -1)
        w = (per[..., doc.answer_record] > per[..., 1 - doc.answer_record]).float()
        wins = w if wins is None else wins + w
        n_ok += 1
    share = wins / n_ok
    return n_ok, {f"{l}.{h}": round(float(share[l, h]), 3) for l, h in heads}, float(share.max()), float(share.mean())


def plain_loss(n_docs=12):
    c = copy.deepcopy(ctrl.cfg); c.eval.draw_seed = 12345
    docs, _ = corpus_eval_docs(c, n_docs, c.eval.doc_tokens)
    with torch.no_grad():
        return sum(wc_tail_loss(ctrl, d.ids, tail=c.eval.tail_tokens, focus=Focus("none"))["loss"] for d in docs) / len(docs)


sel_docs = [make_sentence_doc(rc, 555_000 + k, tok, hay_tr) for k in range(60)]
heads, raw_share = teacher_heads(sel_docs)
print("teacher heads", heads, flush=True)
test_docs = [make_sentence_doc(rc, 888_000 + k, tok, hay_va) for k in range(60)]
before = gist_share(test_docs, heads)
pl_before = plain_loss()
print("before: untied docs", before[0], "teacher heads' shares", before[1], "best any head", round(before[2], 3),
      "mean", round(before[3], 3), "plain compressed loss", round(pl_before, 4), flush=True)
opt = torch.optim.AdamW(gnet.parameters(), lr=lr, weight_decay=0.0)
train_docs = [make_sentence_doc(rc, 600_000 + k, tok, hay_tr) for k in range(n_train)]
hl = torch.tensor([l for l, _ in heads]); hh = torch.tensor([h for _, h in heads])
t0 = time.time()
for ep in range(epochs):
    random.Random(ep).shuffle(train_docs)
    tot, cnt = 0.0, 0
    for doc in train_docs:
        prompt, s, m, n, ents, spans = doc_parts(doc)
        gist = torch.tensor([lod > 0 for lod, _ in ents])
        if gist.sum() < 2:
            continue
        caught.clear()
        with torch.no_grad():
            base(prompt[None])
            raw = torch.stack([c.float() for c in caught])[hl, hh][:, -NQ:, :]  # [R, NQ, T]
        # teacher: raw attention summed over each entry's span, then over gist entries only, renormalised
        tgt = torch.stack([raw[..., a:b].sum(-1) for a, b in spans], -1)[..., gist]  # [R, NQ, G]
        tgt = tgt / tgt.sum(-1, keepdim=True).clamp_min(1e-9)
        emb = layout_embeds(prompt, ents)
        caught.clear()
        ctrl.base_logits(emb[None], m.positions[None, :n], m.lods[None, :n], m.mask[None, :n])
        stu = torch.stack(caught)[hl, hh][:, -NQ:, :].float()[..., gist]  # [R, NQ, G]
        stu = stu / stu.sum(-1, keepdim=True).clamp_min(1e-9)
        if MODE == "kl":
            loss = (tgt * (tgt.clamp_min(1e-9).log() - stu.clamp_min(1e-9).log())).sum(-1).mean()
        else:  # pairwise: the queried record's best gist above the other record's, on the retrieval heads
            lods_t = torch.tensor([lod for lod, _ in ents])
            ov = [((s.wc.overlap_mask(a, b) > 0) & (lods_t > 0))[gist] for a, b in doc.record_spans]
            if (ov[0] & ov[1]).any() or not (ov[0].any() and ov[1].any()):
                continue
            a_q = stu.clamp_min(1e-9).log().mean(1)[:, ov[doc.answer_record]].max(-1).values  # [R]
            a_o = stu.clamp_min(1e-9).log().mean(1)[:, ov[1 - doc.answer_record]].max(-1).values
            loss = F.softplus(1.0 - (a_q - a_o)).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        tot += float(loss.detach()); cnt += 1
    print(f"epoch {ep}: KL {tot / max(cnt, 1):.4f} over {cnt} docs, {time.time() - t0:.0f} s", flush=True)
    # the tree in later sessions uses the updated GistNet (sessions gist through ctrl._run_gistnet -> gnet)
    after = gist_share(test_docs, heads)
    print("  after: untied docs", after[0], "teacher heads' shares", after[1], "best any head", round(after[2], 3),
          "mean", round(after[3], 3), "plain compressed loss", round(plain_loss(), 4), flush=True)
