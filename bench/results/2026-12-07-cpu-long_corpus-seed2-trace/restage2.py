"""Stage 2 again over seed 2's records_region-0.65 base with train.seed 102 (aux-net init, batches and variants differ;
the base is the same file): is seed 2's loss the base's or stage 2's draw? Paths are this session's copies (/tmp/s16/new_s2 =
/tmp/s15/runs/late_s2 of ../2026-12-07-cpu-long_corpus-late-records/; rs_s2 holds a copy of its stage1/)."""
import json, time, torch
from mc.config import from_dict, RunConfig
from mc.train.stage2 import train_stage2
torch.set_num_threads(2)
d = json.load(open('/tmp/s16/new_s2/config.json'))
d['train']['seed'] = 102; d['name'] = 'rs_s2'; d['out_dir'] = '/tmp/s16'
cfg = from_dict(RunConfig, d)
json.dump(d, open('/tmp/s16/rs_s2/config.json', 'w'), indent=1)
t = time.time()
print(train_stage2(cfg, '/tmp/s16/rs_s2', progress=False), time.time() - t)
