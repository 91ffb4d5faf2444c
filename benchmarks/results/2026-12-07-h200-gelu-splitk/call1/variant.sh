#!/usr/bin/env bash
# variant.sh SRC NAME: edits the project copy in SRC into variant NAME (exits non-zero if an edit did not apply).
#   gelu     BERT's FFN-in + GELU in triton_linear's kernel (erf form, PDL) up to 256 tokens, not cuBLASLt's epilogue
#   sk128    the split-K projections in 64 x 32 x 128 tiles (64 x 64 x 64 on main)
#   both     gelu + sk128
#   rawcopy  the replay's input copy and the download through the CUDA driver (copies.py beside this script, put in
#            kernels/cuda/), instead of torch's copy_ of the pinned slots
set -euo pipefail
src=$1 name=$2 here=$(dirname "$0")
edit() {  # edit FILE OLD NEW: one exact replacement, or fail
  python3 - "$src/$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
assert text.count(old) == 1, (path, old)
open(path, "w").write(text.replace(old, new))
PY
}
if [ $name = gelu ] || [ $name = both ]; then
  edit kernels/cuda/triton_linear.py '{"activation": None,' '{"activation": (1, 256),'
fi
if [ $name = sk128 ] || [ $name = both ]; then
  edit kernels/cuda/triton_split_k.py 'block_m, block_n, block_k = 64, 64, 64' 'block_m, block_n, block_k = 64, 32, 128'
fi
if [ $name = rawcopy ]; then
  cp $here/copies.py $src/kernels/cuda/copies.py
  edit kernels/cuda/runner.py 'from embedpipe.kernels.batch import Batch
' 'from embedpipe.kernels.batch import Batch
from embedpipe.kernels.cuda import copies
'
  edit kernels/cuda/runner.py '        inputs_buf.copy_(host, non_blocking=True)
        self.attn.plan(host_cu, batch.num_seqs, key, device_cu)
        graph.replay()' '        copies.to_device(inputs_buf, host, self.stream)
        self.attn.plan(host_cu, batch.num_seqs, key, device_cu)
        graph.replay()'
  edit kernels/cuda/runner.py '        host.copy_(out[:num_rows], non_blocking=True)' '        copies.to_host(host, out[:num_rows], self.stream)'
fi
