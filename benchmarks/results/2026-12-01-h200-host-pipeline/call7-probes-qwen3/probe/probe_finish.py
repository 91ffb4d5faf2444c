"""Times the index build's phases from vectors in memory, as the job builds it."""
import cProfile, pstats, sys, time
from pathlib import Path
import pyarrow.parquet as pq
from embedpipe.pipeline import faiss_index
from embedpipe.pipeline.manifest import completed_units

out = Path(sys.argv[1])
in_memory = {}
for record in completed_units(out).values():
    path = out / "embeddings" / record["file_name"]
    col = pq.read_table(path, columns=["embedding"]).column(0).combine_chunks()
    in_memory[path] = [col.flatten().to_numpy().reshape(len(col), col.type.list_size).copy()]
start = time.perf_counter()
profile = cProfile.Profile()
profile.enable()
faiss_index.build_index([out], Path("/tmp/probe/index"), "Flat", True, in_memory=in_memory)
profile.disable()
print("build_index", time.perf_counter() - start)
pstats.Stats(profile).sort_stats("cumulative").print_stats(22)
