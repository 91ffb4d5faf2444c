"""Device call 2's choice, read off linear-act.json (the sweep of that call): per epilogue, the fastest tile at 128
tokens (<= 256) and at 32,768 (> 256), and the token counts at which the fused kernel beats cuBLAS + the
activation kernel on every shape of that epilogue (a run from the largest count up or from the smallest down). Prints the Python that replaces tile_config and TOKEN_RANGES in
a build of kernels/cuda/triton_linear.py (argv[2]); the result is recorded in the README, not kept in the code."""
import json
import re
import sys
from collections import defaultdict

rows = [r for r in json.load(open(sys.argv[1]))["rows"] if "us" in r]
by = defaultdict(dict)
for r in rows:
    by[(r["shape"], r["tokens"])][r["variant"]] = r


def fused(shape, m):
    cands = {v: r for v, r in by[(shape, m)].items() if v.startswith("fused ")}
    return min(cands.items(), key=lambda kv: kv[1]["us"]) if cands else (None, None)


def parse(variant):  # "fused 128x256x64 w8 s3 tma" -> TileConfig args
    bm, bn, bk = map(int, re.search(r"(\d+)x(\d+)x(\d+)", variant).groups())
    w, st = int(re.search(r" w(\d+)", variant).group(1)), int(re.search(r" s(\d+)", variant).group(1))
    return (f"TileConfig({bm}, {bn}, {bk}, 8, {w}, {st}{', tma=True' if 'tma' in variant else ''}"
            f"{', persistent=True' if 'persistent' in variant else ''})")


choice, ranges = {}, {}
for kind, shapes, base in (("activation", ("bert-base", "minilm"), "cublas+gelu"),
                           ("silu_mul", ("qwen3-0.6b",), "cublas+silu_mul")):
    choice[kind] = (parse(fused(shapes[0], 128)[0]), parse(fused(shapes[0], 32768)[0]))
    tokens = sorted({m for (s, m) in by if s == shapes[0]})
    wins = {m: all(fused(s, m)[1]["us"] < by[(s, m)][base]["us"] for s in shapes if (s, m) in by) for m in tokens}
    ranges[kind] = "None"  # a run of wins from the largest count up, or from the smallest down; else never
    if wins[tokens[-1]]:
        lo = min(m for m in tokens if all(wins[t] for t in tokens if t >= m))
        ranges[kind] = f"({lo}, 1 << 30)"
    elif wins[tokens[0]]:
        hi = max(m for m in tokens if all(wins[t] for t in tokens if t <= m))
        ranges[kind] = f"(1, {hi})"
    print(f"# {kind}: wins {wins}", file=sys.stderr)
src = open(sys.argv[2]).read()
table = (f'def tile_config(num_tokens: int, gated: bool) -> TileConfig:\n    """picked on the device"""\n'
         f'    if gated:\n        return {choice["silu_mul"][0]} if num_tokens <= 256 else {choice["silu_mul"][1]}\n'
         f'    return {choice["activation"][0]} if num_tokens <= 256 else {choice["activation"][1]}\n\n\n')
src = re.sub(r"def tile_config\(.*?\n\n\n", table, src, flags=re.S)
src = re.sub(r"^TOKEN_RANGES: .*$", f'TOKEN_RANGES: dict[str, tuple[int, int] | None] = {{"activation": '
             f'{ranges["activation"]}, "silu_mul": {ranges["silu_mul"]}, "identity": None}}', src, flags=re.M)
open(sys.argv[2], "w").write(src)
print(table, ranges)
