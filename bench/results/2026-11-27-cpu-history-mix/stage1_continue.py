"""A record (not a tool): seed 2's long_corpus stage 1 resumed from its 1200-step checkpoint with steps=2400 (a copy of the
run folder in /tmp/s2x: stage1/ and config.json), to see whether a longer stage 1 makes the copy."""
import json, time
from mc.config import from_dict, RunConfig
from mc.config_checks import validate
from mc.train.stage1 import train_stage1
cfg = from_dict(RunConfig, json.load(open('/tmp/s2x/config.json')))
cfg.train.stage1.steps = 2400
validate(cfg)
t = time.time()
print(train_stage1(cfg, '/tmp/s2x', progress=False), time.time() - t)
