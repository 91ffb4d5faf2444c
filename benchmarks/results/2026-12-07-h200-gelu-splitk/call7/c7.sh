#!/usr/bin/env bash
# Device call 7 (issue 19), run as one command line on call 6's warm H100: call 6's sweep showed one stage beating two
# for the folded kernel; this sweeps one-stage configurations folded (Qwen3-0.6B, 1 x 16 / 1 x 128 / 1 x 512), and the
# unfolded kernel alone for Qwen3-0.6B and BERT-base (1 x 16, 1 x 128). ~70 s. Carry: .whl-lite .gpu-lite.
. benchmarks/gpu_setup.sh >/dev/null 2>&1; cd benchmarks && timeout 150 python3 attention_configs.py --out $OUT/fold2 --fold --shapes qwen3-0.6b --batches 1x16,1x128,1x512 --configs 16x64x4x2,16x64x4x1,16x32x4x1,16x128x8x1,16x128x4x1,32x64x4x1,16x64x8x1,32x32x4x1,64x64x4x1,16x32x2x1,64x64x8x1,32x64x8x1 2>&1 | grep -v Warn | tail -5; timeout 100 python3 attention_configs.py --out $OUT/nofold --shapes qwen3-0.6b,bert-base --batches 1x16,1x128 --configs 16x64x4x2,16x64x4x1,16x32x4x1,32x64x4x1,64x64x4x1,64x64x4x2,64x64x8x1,32x32x4x1 2>&1 | grep -v Warn | tail -5
