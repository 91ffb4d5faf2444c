#!/usr/bin/env bash
# Device call 10 (issue 19), one command line on the same warm H100: more one-stage folded configurations (8 and 16
# warps, 32-row blocks) at 1 x 16 and 1 x 128. ~25 s. Carry: .whl-lite .gpu-lite.
. benchmarks/gpu_setup.sh >/dev/null 2>&1; cd benchmarks && timeout 150 python3 attention_configs.py --out $OUT/fold3 --fold --shapes qwen3-0.6b --batches 1x16,1x128 --configs 16x64x8x1,16x128x8x1,16x128x16x1,16x64x16x1,32x128x8x1,16x32x8x1,32x64x8x1,16x128x8x2,16x64x8x2,32x128x16x1 2>&1 | grep -v Warn | tail -3
