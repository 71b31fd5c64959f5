"""Why does the 8x oracle fail on SmolLM2? Same oracle layout, different inputs to the base."""
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

mult, n, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
depth = float(sys.argv[4]) if len(sys.argv) > 4 else 0.5
cfg = _eval_config(load_config(["preset=h100_smollm2", "train.device=cpu", "model.hf_dtype=float32", f"mc.positions={mode}"]))
torch.manual_seed(0)
ctrl = build_controller(cfg, device=torch.device("cpu"))
for m in (ctrl.base, ctrl.gistnet, ctrl.lensnet): m.eval()
tok = tokenizer_for(cfg.model)
source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
budget, window = cfg.mc.max_entries, cfg.model.max_seq_len
base = ctrl.base

@torch.no_grad()
def greedy(emb, pos, lods, n_new=10):
    """emb [L, D], pos [L] (already base positions), lods [L] -> text (full recompute per token)."""
    out = []
    for _ in range(n_new):
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
    res["as_is"] = greedy(emb, bpos, lods)
    res["raw_only_mapped_pos"] = greedy(emb[raw], bpos[raw], lods[raw])
    res["raw_only_contig_pos"] = greedy(emb[raw], torch.arange(int(raw.sum()), dtype=bpos.dtype), lods[raw])
    # gists kept, positions contiguous in entry order
    res["all_contig_pos"] = greedy(emb, torch.arange(L, dtype=bpos.dtype), lods)
    # gists kept, lods set to 0 (plain rotary), mapped positions
    res["lod0_rotary"] = greedy(emb, bpos, torch.zeros_like(lods))
    print(f"doc {k} answers={doc.answers} entries={L} raw={int(raw.sum())} gists={int((~raw).sum())} "
          f"pos range {float(bpos.min()):.0f}-{float(bpos.max()):.0f}")
    for kk, v in res.items():
        print(f"   {kk:22s} {string_match_all(v, doc.answers):.0f} {v!r}")
    gn = emb[~raw].norm(dim=-1).mean(); tn = emb[raw].norm(dim=-1).mean()
    print(f"   gist norm {float(gn):.3f} token norm {float(tn):.3f}")
