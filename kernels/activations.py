"""config.json's hidden_act names -> the functions, as transformers computes them (the reference for the fused
epilogues of kernels/cuda/triton_linear.py)."""
from __future__ import annotations

import torch.nn.functional as F

ACTIVATIONS = {
    "gelu": F.gelu,  # exact erf form
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "identity": lambda x: x,  # a plain linear layer (ops.linear_act with no activation)
}
