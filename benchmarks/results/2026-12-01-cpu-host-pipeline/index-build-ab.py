"""The index build from vectors in memory (as a finishing job has them), timed: python bench.py REPO OUT SEED"""
import sys, time, importlib
from pathlib import Path
repo, out = sys.argv[1], Path(sys.argv[2])
import numpy as np, pyarrow as pa
sys.path.insert(0, repo)
# the package maps embedpipe.* to the repo's folders: load them from this checkout
import importlib.util, types
pkg = types.ModuleType("embedpipe"); pkg.__path__ = []; sys.modules["embedpipe"] = pkg
for name in ("pipeline", "kernels", "cli"):
    spec = importlib.util.spec_from_file_location(f"embedpipe.{name}", f"{repo}/{name}/__init__.py", submodule_search_locations=[f"{repo}/{name}"])
    module = importlib.util.module_from_spec(spec); sys.modules[f"embedpipe.{name}"] = module; spec.loader.exec_module(module)
from embedpipe.pipeline.faiss_index import build_index
from embedpipe.pipeline.sinks import UnitWriter
from embedpipe.pipeline.manifest import mark_done
from embedpipe.pipeline.sources import WorkUnit
rows, dim, per_unit = 200_000, 384, 65536
if not (out / "embeddings").exists():
    rng = np.random.default_rng(0)
    for u, start in enumerate(range(0, rows, per_unit)):
        n = min(per_unit, rows - start)
        v = rng.standard_normal((n, dim)).astype(np.float32); v /= np.linalg.norm(v, axis=1, keepdims=True)
        with UnitWriter(out, f"u{u:03d}", dim, "float32", pa.field("id", pa.int64())) as w:
            w.write(pa.array(np.arange(start, start + n)), v)
        mark_done(out, WorkUnit(f"u{u:03d}", "/in", "parquet", 0, 1, f"u{u:03d}"), n, 0, w.path.name)
import pyarrow.parquet as pq
from embedpipe.pipeline.manifest import completed_units
in_memory = {}
for record in completed_units(out).values():
    path = out / "embeddings" / record["file_name"]
    col = pq.read_table(path, columns=["embedding"]).column(0).combine_chunks()
    in_memory[path] = [col.flatten().to_numpy().reshape(len(col), dim).copy()]
start = time.perf_counter()
build_index([out], out / "index", "Flat", True, in_memory=in_memory)
print(f"{time.perf_counter() - start:.3f}")
