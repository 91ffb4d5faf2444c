"""Device call 1: each candidate tile of Qwen3's QKV projection against float32 (max abs error) and cuBLAS in bf16,
at 16 and 128 tokens, before any timing: a tile that computes something else must not be timed."""
import torch

from embedpipe.kernels.cuda.triton_linear import TileConfig, linear_act

TILES = [(64, 32, 128, 4, 3), (64, 64, 64, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 128, 64, 8, 3)]
torch.manual_seed(0)
w = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16) * 0.03
for tokens in (16, 128):
    x = torch.randn(tokens, 1024, device="cuda", dtype=torch.bfloat16)
    exact = x.float() @ w.float().T
    cublas = (x @ w.T).float()
    print(f"{tokens} tokens cuBLAS: max err {(cublas - exact).abs().max().item():.4f}")
    for bm, bn, bk, warps, stages in TILES:
        out = linear_act(x, w, None, "identity", TileConfig(bm, bn, bk, 8, warps, stages)).float()
        err, vs = (out - exact).abs().max().item(), (out - cublas).abs().max().item()
        print(f"{tokens} tokens {bm}x{bn}x{bk} w{warps} s{stages}: max err {err:.4f}, vs cuBLAS {vs:.4f}",
              "OK" if err <= 2 * (cublas - exact).abs().max().item() + 1e-3 else "WRONG")
