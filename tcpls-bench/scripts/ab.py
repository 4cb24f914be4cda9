#!/usr/bin/env python3
"""Interleaved A/B of `tcpls-bench compare` binaries on a shared, noisy machine.

usage: ab.py ROUNDS PROTOS LABEL=[ENV=VALUE,...]:BINARY ...
  e.g. cp target/release/tcpls-bench /tmp/before   # before the change, then rebuild
       tcpls-bench/scripts/ab.py 8 tcpls,tcpls-64,tcpls-1000 before=:/tmp/before after=:target/release/tcpls-bench

Each round runs `BINARY compare --protos PROTOS --bytes 1G --reps 3` once per variant, in
turn (one benchmark at a time), then prints per variant and protocol the medians over all
repetitions: goodput, CPU s/GiB of sender, receiver and both, the other programs' load, and
the share of the received bytes that took the zero-copy path.
"""
import sys, subprocess, re, statistics, os
if len(sys.argv) < 4:
    sys.exit(__doc__)
rounds=int(sys.argv[1]); protos=sys.argv[2]
variants=[]
for a in sys.argv[3:]:
    label,rest=a.split('=',1)
    envs,binary=rest.rsplit(':',1)
    env=dict(os.environ)
    for kv in filter(None,envs.split(',')):
        k,v=kv.split('='); env[k]=v
    variants.append((label,binary,env))
data={}
pat=re.compile(r"rep \d+/\d+ (\S+)\s+([\d.]+) Gbit/s.*CPU s/GiB sender ([\d.]+) receiver ([\d.]+).*other load (\d+)%.*zero-copy (\d+) B, copied (\d+) B")
for r in range(rounds):
    for label,binary,env in variants:
        out=subprocess.run([binary,"compare","--protos",protos,"--bytes","1G","--reps","3"],env=env,capture_output=True,text=True)
        for line in (out.stdout+out.stderr).splitlines():
            m=pat.search(line)
            if m:
                p=m.group(1); d=data.setdefault((label,p),[])
                d.append(tuple(float(x) for x in m.groups()[1:]))
        print(f"round {r+1} {label} done", file=sys.stderr, flush=True)
ps=protos.split(',')
print(f"{'variant':10} {'proto':11} {'n':>3} {'Gbit/s':>7} {'send':>6} {'recv':>6} {'total':>6} {'load%':>5} {'zc%':>5}")
for p in ps:
    for label,_,_ in variants:
        d=data.get((label,p),[])
        if not d: continue
        med=lambda i: statistics.median(x[i] for x in d)
        zc=sum(x[4] for x in d)/max(1,sum(x[4]+x[5] for x in d))*100
        print(f"{label:10} {p:11} {len(d):3} {med(0):7.2f} {med(1):6.3f} {med(2):6.3f} {statistics.median(x[1]+x[2] for x in d):6.3f} {med(3):5.0f} {zc:5.1f}")
