"""One --devices 0 and one --ray local run of BERT-base (ROWS rows), keeping each run's metrics.json in $OUT."""
import json, os, shutil, subprocess, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "benchmarks")
from common import model_folder, warm_gpu
from workloads import corpus_lengths, texts_of_lengths, write_corpus
from multi_gpu_scaling import index_command, unit_rows
rows = int(sys.argv[1]); out = Path(os.environ["OUT"]) / "diag"; out.mkdir(parents=True, exist_ok=True)
tmp = Path(tempfile.mkdtemp())
model = model_folder("bert-base", tmp / "models")
distinct = texts_of_lengths(model, corpus_lengths(min(rows, 100_000)))
corpus = write_corpus([distinct[i % len(distinct)] for i in range(rows)], tmp / "c.parquet", row_group_size=min(4096, unit_rows(rows)))
for name, engines in (("devices", ["--devices", "0"]), ("ray", ["--ray", "local", "--devices", "all"])):
    warm_gpu()
    start = time.perf_counter()
    p = subprocess.run(index_command("index", corpus, "--output", tmp / name, "--model", model, "--rows-per-unit",
                                     unit_rows(rows), *engines), capture_output=True, text=True)
    wall = time.perf_counter() - start
    (out / f"{name}.stderr.txt").write_text(p.stderr[-20000:])
    if p.returncode == 0:
        shutil.copy(tmp / name / "metrics.json", out / f"{name}-metrics.json")
    m = json.loads((tmp / name / "metrics.json").read_text()) if p.returncode == 0 else {}
    print(name, p.returncode, f"wall {wall:.1f}", {k: m.get(k) for k in ("seconds", "tokens_per_s", "chunk_wait_s", "host_cpu_s", "start_s", "startup")}, flush=True)
