"""Per-hop stamps of one-at-a-time queries to a real `embedpipe serve` (stamps patch applied).
    python scratch/hops_gpu.py NAME MODEL WORKERS OUTFILE"""
import glob, http.client, json, os, statistics, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, "benchmarks"); sys.path.insert(0, "scratch")
from http_servers import OURS_READY, Server, our_server
from stamp import stamp
name, model, workers, outfile = sys.argv[1:5]
for f in glob.glob("/tmp/stamps-*.log"): os.remove(f)
s = Server(name, our_server(Path(model), "cuda", "--http-workers", workers), Path(f"/tmp/hops-{name}.log"), {}, OURS_READY)
s.wait_healthy()
payload = json.dumps({"input": "how do I reset my router password quickly", "encoding_format": "base64"}).encode()
c = http.client.HTTPConnection("127.0.0.1", s.port)
lat = []
try:
    for i in range(600):
        stamp('_client_send'); t = time.perf_counter()
        c.request("POST", "/v1/embeddings", payload, {"Content-Type": "application/json"})
        r = c.getresponse(); r.read(); stamp('~client_done')
        lat.append((time.perf_counter() - t) * 1e3)
finally:
    s.stop()
ev = []
for f in glob.glob("/tmp/stamps-*.log"):
    for line in open(f):
        l, t = line.split(); ev.append((float(t), l))
ev.sort()
reqs, cur = [], None
for t, l in ev:
    if l == "_client_send":
        cur = [(t, l)]; reqs.append(cur)
    elif cur is not None:
        cur.append((t, l))
reqs = reqs[200:]
order, seq = {}, []
for r in reqs:
    prev, seen = r[0][0], set()
    for t, l in r:
        if l in seen: continue
        seen.add(l)
        if l not in seq: seq.append(l)
        order.setdefault(l, []).append((t - prev) * 1e3); prev = t
lines, tot = [f"{name} workers={workers} client p50 {statistics.median(lat[200:]):.3f} ms"], 0
for l in seq:
    m = statistics.median(order[l]); tot += m
    lines.append(f"{l:15s} +{m:.3f} ms  cum {tot:.3f} (n={len(order[l])})")
Path(outfile).write_text("\n".join(lines) + "\n"); print("\n".join(lines))
