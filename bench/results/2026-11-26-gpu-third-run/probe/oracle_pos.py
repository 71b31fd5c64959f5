"""Does the SmolLM2 base read a raw needle through an 8x-W oracle layout? bounded vs entries positions."""
import sys, time, json
import torch
from mc.config_loading import load_config
from mc.build import build_controller
from mc.eval.task_suite import run_task_suite
mode, mult, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
variants = sys.argv[4].split(",") if len(sys.argv) > 4 else ["oracle", "recency"]
cfg = load_config(["preset=h100_smollm2", "train.device=cpu", "model.hf_dtype=float32", f"mc.positions={mode}",
                   "eval.tasks.tasks=[passkey]", f"eval.tasks.multiples=[{mult}]", "eval.tasks.depths=[0.5]",
                   f"eval.tasks.n_per_cell={n}", f"eval.tasks.variants=[{','.join(variants)}]"])
torch.manual_seed(0)
ctrl = build_controller(cfg, device=torch.device("cpu"))
for m in (ctrl.base, ctrl.gistnet, ctrl.lensnet): m.eval()
t = time.time()
from mc.eval.evaluate import _eval_config
res = run_task_suite(ctrl, _eval_config(cfg), progress=False)
for c in res["cells"]:
    print(mode, c["task"], c["multiple"], c["depth"], c["variant"], c["score"], c["n"], c.get("answers_at_lod0"))
for r in res["rows"][:6]: print({k: r[k] for k in r if k in ("variant", "answer", "greedy", "text", "output", "pred")})
print("secs", round(time.time() - t, 1))
