"""The StepBench of long_corpus with a trained run's stage-2 nets and optimizer state (its stage-2 checkpoint) and its
stage-1 base: what when_set.py and ops.py time. Import it after setting MC_FLUSH_DENORMAL (read at `import mc`)."""
from mc.app.step_profile import StepBench
from mc.build import load_base_weights
from mc.config_loading import load_config
from mc.train.checkpoint import load_checkpoint


def trained_bench(run: str) -> tuple[StepBench, int]:
    """(the bench, the checkpoint's step), two warm-up steps already run."""
    st = load_checkpoint(f"{run}/stage2/ckpt.pt")
    b = StepBench(load_config(["preset=long_corpus"]))
    load_base_weights(b.ctrl.base, f"{run}/stage1/base.pt")
    b.ctrl.load_state_dict(st["controller"])
    b.opt.load_state_dict(st["optimizer"])
    for _ in range(2):
        b.step()
    return b, st["step"]
