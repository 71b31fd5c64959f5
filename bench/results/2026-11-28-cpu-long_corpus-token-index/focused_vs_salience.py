# focused - salience (and focused/oracle) per task x multiple, paired bootstrap CI; usage: fs.py name=eval.json ...
import json,sys,random,collections
def boot(d,n=4000):
    rng=random.Random(0);m=len(d);xs=sorted(sum(rng.choice(d) for _ in range(m))/m for _ in range(n));return sum(d)/m,xs[100],xs[3899]
for arg in sys.argv[1:]:
    name,p=arg.split('=',1);lr=json.load(open(p))['long_range'];W=lr['base_window']
    g=collections.defaultdict(list)
    for r in lr['rows']:
        t=r['task'].split('@')[0];g[(t,r['length']//W)].append(r['exact'])
    for k in sorted(g):
        e=g[k];f=sum(x['focused'] for x in e);s=sum(x['salience'] for x in e);o=sum(x['oracle'] for x in e)
        m,lo,hi=boot([int(x['focused'])-int(x['salience']) for x in e])
        print(f"{name} {k[0]:12s} {k[1]:3d}x n={len(e)} focused {f} salience {s} oracle {o} f/o {f/max(o,1):.2f} f-s {m:+.3f} [{lo:+.3f},{hi:+.3f}]")
