"""Output folders of completed units written directly, without a job: for the index tests."""
import pyarrow as pa

from embedpipe.pipeline.inputs.sources import WorkUnit
from embedpipe.pipeline.output.manifest import mark_done
from embedpipe.pipeline.output.sinks import UnitWriter


def write_unit(output_dir, unit_id, ids, vectors, dtype_name="float32", kept=None):
    kept = kept or {}
    id_field = pa.field("doc", pa.array(ids).type)
    kept_fields = [pa.field(name, pa.array(values).type) for name, values in kept.items()]
    with UnitWriter(output_dir, unit_id, vectors.shape[1], dtype_name, id_field, kept_fields) as writer:
        writer.write(pa.array(ids), vectors, [pa.array(v) for v in kept.values()])
    unit = WorkUnit(unit_id, "/in/" + unit_id, "parquet", 0, 1, unit_id)
    mark_done(output_dir, unit, len(ids), 0, writer.path.name)


def write_units(output_dir, vectors, rows_per_unit, dtype_name="float32", first_id=0):
    for start in range(0, len(vectors), rows_per_unit):
        ids = list(range(first_id + start, first_id + min(start + rows_per_unit, len(vectors))))
        unit_rows = vectors[start:start + rows_per_unit]
        write_unit(output_dir, f"f.parquet#rg{start:05d}", ids, unit_rows, dtype_name)
