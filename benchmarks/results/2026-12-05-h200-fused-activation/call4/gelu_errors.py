"""Where the GELU epilogues part from torch's GELUs (device call 4, issue 19): through an identity weight, so the
matmul is exact and h = x + bias, for h in [-6, 6]: per band of |h|, the largest gap in bfloat16 units in the last
place and in absolute terms, and the share of bit-equal elements, of
- the Triton kernel's erf epilogue (act "gelu")   against F.gelu(h rounded) rounded,
- the Triton kernel's tanh epilogue                against F.gelu(h rounded, approximate="tanh") rounded,
- cuBLASLt's GELU_BIAS epilogue (TritonOps "gelu") against the tanh form of h (float32, unrounded) and the erf form;
and the float64 truth of each form, to tell which side of a gap is off. Writes JSON to argv[1]."""
import json
import sys

import torch
import torch.nn.functional as F

from embedpipe.kernels.cuda import triton_linear
from embedpipe.kernels.cuda.triton_ops import TritonOps

dtype, dev = torch.bfloat16, "cuda"
torch.manual_seed(0)
x = (torch.rand(4096, 128, device=dev) * 12 - 6).to(dtype)
b = (torch.randn(128, device=dev) * 0.5).to(dtype)
eye = torch.eye(128, device=dev, dtype=dtype)
h_rounded = (x.float() + b.float()).to(dtype).float()
h_exact = x.float() + b.float()
erf64 = lambda h: F.gelu(h.double())
tanh64 = lambda h: F.gelu(h.double(), approximate="tanh")
cases = {
    "triton erf": (triton_linear.linear_act(x, eye, b, "gelu"), h_rounded, F.gelu(h_rounded).to(dtype), erf64),
    "triton tanh": (triton_linear.linear_act(x, eye, b, "gelu_pytorch_tanh"), h_rounded,
                    F.gelu(h_rounded, approximate="tanh").to(dtype), tanh64),
    "cublaslt vs tanh": (TritonOps.linear_act(x, eye, b, "gelu"), h_exact, F.gelu(h_exact, approximate="tanh").to(dtype),
                         tanh64),
    "cublaslt vs erf": (TritonOps.linear_act(x, eye, b, "gelu"), h_exact, F.gelu(h_exact).to(dtype), erf64),
}
eps = torch.finfo(dtype).eps
bands = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 7)]
out = {}
for name, (got, h, want, truth) in cases.items():
    got, want = got.float().flatten(), want.float().flatten()
    h = h.flatten()
    true = truth(h).to(dtype).double().flatten()
    rows = []
    for lo, hi in bands:
        for sign in (-1, 1):
            keep = (h * sign >= lo) & (h * sign < hi)
            if not keep.any():
                continue
            g, w, t = got[keep], want[keep], true[keep]
            unit = eps * w.abs().clamp_min(torch.finfo(dtype).tiny)
            rows.append(dict(band=f"{'-' if sign < 0 else '+'}[{lo},{hi})", n=int(keep.sum()),
                             max_ulps=float(((g - w).abs() / unit).max()), max_abs=float((g - w).abs().max()),
                             equal=float((g == w).float().mean()),
                             got_vs_true64_abs=float((g.double() - t).abs().max()),
                             want_vs_true64_abs=float((w.double() - t).abs().max())))
    out[name] = rows
    print(name)
    for r in rows:
        print("  ", r)
json.dump(out, open(sys.argv[1], "w"), indent=1)
