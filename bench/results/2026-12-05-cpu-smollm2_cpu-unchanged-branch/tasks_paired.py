"""Task-suite reads A and B of the same documents, paired: per variant and task, correct documents A -> B, gained,
lost, and refocuses in B that made no edit.   python tasks_paired.py A/tasks.json B/tasks.json"""
import json,sys
a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
key=lambda r:(r['task'],r['multiple'],r['depth'],r['doc'])
B={key(r):r for r in b['rows']}
for v in a['rows'][0]['score']:
    for task in dict.fromkeys(r['task'] for r in a['rows']):
        rs=[r for r in a['rows'] if r['task']==task]
        sa=sum(r['score'][v] for r in rs); sb=sum(B[key(r)]['score'][v] for r in rs)
        g=sum(B[key(r)]['score'][v]>r['score'][v] for r in rs); l=sum(B[key(r)]['score'][v]<r['score'][v] for r in rs)
        nz=sum(B[key(r)]['edits'][v]==0 for r in rs)
        print(f"{v:9s} {task:9s} {sa:.0f} -> {sb:.0f} of {len(rs)} (gained {g}, lost {l}); no-edit refocus in b: {nz}")
