"""Device call 1's variant builds: Qwen3's QKV projection (4,096 x 1,024: above IDENTITY_MAX_WEIGHT) in
triton_linear's kernel up to 256 tokens, with the tile given on the command line, launched with PDL like the other
Triton kernels of the layer (cuBLAS's QKV is the one kernel of a Qwen3 layer launched without it).

    python qkv_tile.py SRC_DIR BLOCK_M BLOCK_N BLOCK_K WARPS STAGES
"""
import sys
from pathlib import Path

src, (bm, bn, bk, warps, stages) = Path(sys.argv[1]), map(int, sys.argv[2:7])
path = src / "kernels/cuda/triton_linear.py"
text = path.read_text()
old_bound = "IDENTITY_MAX_WEIGHT = 2 << 20"
old_pick = "    config = config or tile_config(m, gated=act == SILU_MUL)\n"
new_pick = (f"    if config is None and act == ACT_CODES['identity'] and weight.numel() > (2 << 20) and m <= 256:\n"
            f"        config = TileConfig({bm}, {bn}, {bk}, 8, {warps}, {stages})\n" + old_pick)
assert text.count(old_bound) == 1 and text.count(old_pick) == 1, "triton_linear.py changed: patch it anew"
path.write_text(text.replace(old_bound, "IDENTITY_MAX_WEIGHT = 8 << 20").replace(old_pick, new_pick))
