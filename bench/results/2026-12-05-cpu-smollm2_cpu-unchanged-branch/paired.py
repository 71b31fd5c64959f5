"""Paired differences (focused - compressed, compressed - recency) of W = 64 evaluations.

    python paired.py RUN_COPY [RUN_COPY ...]   (each eval/eval.json, or a copy of one)"""
import json,sys
for d in sys.argv[1:]:
    e=json.load(open(d if d.endswith('.json') else d+'/eval/eval.json'))
    p=e['paired']; m=e['metrics'] if 'metrics' in e else {}
    print(d, 'draw', e['settings']['draw_seed'], 'unch', e['settings']['refocus']['inference']['branch_unchanged'], f"{e['seconds']:.0f}s")
    for k in ('corpus_tail_loss','recall_tail_loss','recall_answer_nll','recall_accuracy'):
        for pair in ('focused-compressed','compressed-recency'):
            x=p[k][pair]; print(f"   {k:18s} {pair:20s} {x['mean']:+.3f} [{x['lo']:+.3f},{x['hi']:+.3f}]")
