#!/usr/bin/env bash
# Device call 4 (issue 19): call 3 again (its outputs were lost: the session ended before they were copied), with
# the two new tests fixed (a capture also replays; the fold checked against float32 q and k, weights about 1).
# The code as it lands ("final": the fold, query blocks of 16 rows for folded 128-row bounds, split-K for every
# add-and-norm projection up to 256 tokens) against "head" (scratch/head.tar.gz: `git archive df9e907`, the tree
# of calls 1-2), and two variants of final: Qwen3's gate-up + SiLU kernel in 64 x 64 x 64 tiles, 4 stages, up to
# 256 tokens ("gu64"), and the plain projections (QKV) in triton_linear's kernel up to 256 tokens ("qkv");
# 3 rounds alternating fresh processes; the GPU tests of what changed; the host phases of a batch-1 step
# (batch1_profile.py --no-gemm). Carry: .whl-lite .gpu-lite scratch.
exec bash "$(dirname "$0")/../call3/c3.sh"
