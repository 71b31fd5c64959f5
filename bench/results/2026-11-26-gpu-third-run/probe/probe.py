"""Why does the 8x oracle fail on SmolLM2? Same oracle layout, different inputs to the base.

    python probe.py SET MULTIPLE N_DOCS POSITION_MODE [DEPTH]     # SET: diag, diag2, diag3, diag4, diag5

The five sets ran as five copies of this file that differed only in their block of variants (and diag2-5
decoding 7 tokens instead of 10); they are merged here, each block unchanged, to keep one copy of the setup."""
import sys, time, zlib
import torch
from mc.config_loading import load_config
from mc.build import build_controller
from mc.eval.evaluate import _eval_config
from mc.eval.task_suite import SEED_OFFSET
from mc.eval.draws import draw_seed
from mc.eval.long_range import needle_depth
from mc.eval.oracle_layout import *  # noqa
from mc.eval import task_suite as ts_mod
from mc.data.real_tasks import make_task_doc, filler_window, string_match_all
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import make_source
from mc.nets.positional import lod_rotary_cos_sin
from mc.positions import base_positions

SET, mult, n, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
depth = float(sys.argv[5]) if len(sys.argv) > 5 else 0.5
N_NEW = 10 if SET == "diag" else 7
cfg = _eval_config(load_config(["preset=h100_smollm2", "train.device=cpu", "model.hf_dtype=float32", f"mc.positions={mode}"]))
torch.manual_seed(0)
ctrl = build_controller(cfg, device=torch.device("cpu"))
for m in (ctrl.base, ctrl.gistnet, ctrl.lensnet): m.eval()
tok = tokenizer_for(cfg.model)
source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
budget, window = cfg.mc.max_entries, cfg.model.max_seq_len
base = ctrl.base

@torch.no_grad()
def greedy(emb, pos, lods, n_new=None):
    """emb [L, D], pos [L] (already base positions), lods [L] -> text (full recompute per token)."""
    out = []
    for _ in range(n_new or N_NEW):
        cos, sin = lod_rotary_cos_sin(pos[None], lods[None], cfg.mc.block_size, base.head_dim, cfg.model.rope_base)
        logits = base(embeds=emb[None], cos=cos, sin=sin, key_padding_mask=torch.ones(1, len(pos), dtype=torch.bool),
                      logit_index=torch.tensor([[len(pos) - 1]]))
        t = int(logits[0, 0].argmax()); out.append(t)
        emb = torch.cat([emb, base.embed(torch.tensor([[t]]))[0]]); pos = torch.cat([pos, pos[-1:] + 1])
        lods = torch.cat([lods, lods.new_zeros(1)])
    return tok.decode(out)

for k in range(n):
    seed = SEED_OFFSET + draw_seed(cfg) * 10_000 + k
    length = mult * budget
    cell_seed = zlib.crc32(repr(("passkey", length, round(depth, 6), seed)).encode())
    doc = make_task_doc("passkey", length, needle_depth(depth, 0.05, seed), seed, tok, filler_window(source, length, cell_seed))
    ctrl.begin_session(doc.ids)
    s = ctrl.session
    ts_mod.multi_span_oracle_refocus(ctrl, list(doc.needle_spans[:1]), core=list(doc.answer_spans[:1]),
                                     question=(doc.question_start, int(doc.ids.numel())))
    mwc = s.materialize()
    L = mwc.length
    emb, gpos, lods, mask = mwc.embeds[:L], mwc.positions[:L], mwc.lods[:L], mwc.mask[:L]
    bpos = base_positions(gpos[None], mask[None], mode=cfg.mc.positions, window=window, recent=cfg.mc.recent_tokens)[0]
    raw = lods == 0
    res = {}
    if SET == "diag":
        res["as_is"] = greedy(emb, bpos, lods)
        res["raw_only_mapped_pos"] = greedy(emb[raw], bpos[raw], lods[raw])
        res["raw_only_contig_pos"] = greedy(emb[raw], torch.arange(int(raw.sum()), dtype=bpos.dtype), lods[raw])
        # gists kept, positions contiguous in entry order
        res["all_contig_pos"] = greedy(emb, torch.arange(L, dtype=bpos.dtype), lods)
        # gists kept, lods set to 0 (plain rotary), mapped positions
        res["lod0_rotary"] = greedy(emb, bpos, torch.zeros_like(lods))
    elif SET == "diag2":
        res["as_is"] = greedy(emb, bpos, lods)
        contig = torch.arange(L, dtype=bpos.dtype)
        tn = emb[raw].norm(dim=-1).mean()
        scaled = emb.clone(); scaled[~raw] = emb[~raw] * (tn / emb[~raw].norm(dim=-1, keepdim=True))
        res["contig_rescaled"] = greedy(scaled, contig, lods)
        res["contig_lod0rot"] = greedy(emb, contig, torch.zeros_like(lods))
        space = base.embed(torch.tensor([tok.encode(" ")[-1:]]))[0][0]
        sp = emb.clone(); sp[~raw] = space
        res["contig_gists_as_space"] = greedy(sp, contig, torch.zeros_like(lods))
        res["mapped_gists_as_space"] = greedy(sp, bpos, torch.zeros_like(lods))
        gl = lods[~raw]; print("gist lods", torch.bincount(gl).tolist(), "first raw idx", int(raw.nonzero()[0]))
    elif SET == "diag3":
        contig = torch.arange(L, dtype=bpos.dtype)
        sink = base.embed(doc.ids[:4][None])[0]  # [4, D] the document's first 4 tokens (BOS first)
        def with_sink(e, p, l, ns=1):
            return greedy(torch.cat([sink[:ns], e]), torch.cat([torch.arange(ns, dtype=p.dtype), p + ns]), torch.cat([l.new_zeros(ns), l]))
        res["as_is"] = greedy(emb, bpos, lods)
        res["sink1_entries"] = with_sink(emb, bpos, lods)
        res["sink4_entries"] = with_sink(emb, bpos, lods, 4)
        res["sink1_contig"] = with_sink(emb, contig, lods)
        res["sink1_raw_only_contig"] = with_sink(emb[raw], torch.arange(int(raw.sum()), dtype=bpos.dtype), lods[raw])
        space = base.embed(torch.tensor([tok.encode(" ")[-1:]]))[0][0]
        sp = emb.clone(); sp[~raw] = space
        res["sink1_contig_space"] = with_sink(sp, contig, torch.zeros_like(lods))
        print("doc ids[:4]", doc.ids[:4].tolist(), repr(tok.decode(doc.ids[:8].tolist())))
    elif SET == "diag4":
        contig = torch.arange(L, dtype=bpos.dtype)
        res["raw_only_entries"] = greedy(emb[raw], bpos[raw], lods[raw])
        res["raw_only_contig"] = greedy(emb[raw], torch.arange(int(raw.sum()), dtype=bpos.dtype), lods[raw])
        g = (~raw).nonzero()[:, 0].tolist(); r = raw.nonzero()[:, 0].tolist()
        print("gist idx runs", [(a) for a in g[:3]], g[-3:], "raw runs", r[:2], r[-2:], "tail start", s.wc.tail_start if hasattr(s.wc,'tail_start') else '')
        print("   bpos around:", [round(float(x)) for x in bpos[torch.tensor(g[-2:] + [g[-1]+1])]], "last", float(bpos[-1]))
    elif SET == "diag5":
        res["as_is"] = greedy(emb, bpos, lods)
        def contig_keep(keep):
            return greedy(emb[keep], torch.arange(int(keep.sum()), dtype=bpos.dtype), lods[keep])
        res["contig_all"] = contig_keep(torch.ones_like(raw))
        res["contig_no_lod2"] = contig_keep(lods < 2)
        res["contig_no_lod1"] = contig_keep(lods != 1)
        print("gist lods", torch.bincount(lods).tolist())
    else:
        raise SystemExit(f"unknown set {SET!r}")
    print(f"doc {k} answers={doc.answers} entries={L} raw={int(raw.sum())} gists={int((~raw).sum())} "
          f"pos range {float(bpos.min()):.0f}-{float(bpos.max()):.0f}")
    for kk, v in res.items():
        print(f"   {kk:22s} {string_match_all(v, doc.answers):.0f} {v!r}")
    gn = emb[~raw].norm(dim=-1).mean(); tn = emb[raw].norm(dim=-1).mean()
    print(f"   gist norm {float(gn):.3f} token norm {float(tn):.3f}")
