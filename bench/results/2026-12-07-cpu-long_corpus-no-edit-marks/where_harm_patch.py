"""where_harm.py with a probe rule: a refocus that keeps no edit leaves the allocator as it was before it (its anchor and
guard marks dropped), the clock ticked."""
import runpy, sys
from mc import controller as cm
real = cm.run_refocus
def patched(s, scores_fn, fit_fn, scheduled=False, relaid=False):
    before = s.allocator.copy()
    rec = real(s, scores_fn, fit_fn, scheduled, relaid)
    if not rec.edits:
        before.end_refocus()
        s.allocator = before
    return rec
cm.run_refocus = patched
sys.argv = ["where_harm.py", *sys.argv[1:]]
runpy.run_path("bench/results/2026-12-07-cpu-long_corpus-no-edit-marks/where_harm.py", run_name="__main__")
