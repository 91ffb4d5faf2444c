"""Every name inside an OUTPUT folder, in one place: what a job writes there, and what tokenize, merge,
verify, query and serve read back.

OUTPUT/
  job.json            the job's settings (manifest.check_or_write_settings)
  units.json          every unit of the job, in order
  manifest/<unit>.json  one record per completed unit: the commit point of its files
  embeddings/<unit>.parquet, or tokens/<unit>.parquet (`embedpipe tokenize`); with --chunk-tokens a row is a
                      window of a text, named by the id and WINDOW_COLUMNS
  rejected/<unit>.parquet, then rejected.parquet (all of them)
  index.faiss, index_ids.parquet, index.json   (here, or in the folder `merge --into` names)
  metrics.json        the last run's figures
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

SETTINGS_FILE = "job.json"
UNITS_FILE = "units.json"
METRICS_FILE = "metrics.json"
REJECTED_FILE = "rejected.parquet"
MANIFEST_FOLDER = "manifest"
EMBEDDINGS_FOLDER = "embeddings"
TOKENS_FOLDER = "tokens"
REJECTED_FOLDER = "rejected"
INDEX_FILE, INDEX_IDS_FILE, INDEX_META_FILE = "index.faiss", "index_ids.parquet", "index.json"
INDEX_FILE_NAMES = (INDEX_FILE, INDEX_IDS_FILE, INDEX_META_FILE)
# cleared by --overwrite, in this order (the records first: a unit without one is not done)
OUTPUT_FOLDERS = (MANIFEST_FOLDER, EMBEDDINGS_FOLDER, TOKENS_FOLDER, REJECTED_FOLDER, "index")
# where writers that never finished may have left hidden temporaries (OUTPUT itself too)
TEMPORARY_FOLDERS = (EMBEDDINGS_FOLDER, TOKENS_FOLDER, REJECTED_FOLDER, MANIFEST_FOLDER, ".")
MAX_NAME_CHARS = 80
# the columns after the id of a --chunk-tokens job's rows (unit files, index_ids.parquet): the window's place
# among its text's windows (int32, from 0) and its characters [char_start, char_end) in the text (int64)
CHUNK_COLUMN = "chunk"
WINDOW_COLUMNS = (CHUNK_COLUMN, "char_start", "char_end")


def safe_name(unit_id: str) -> str:
    """A file-name stem for a unit: readable, and unique thanks to a hash of the full unit_id."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", unit_id)[:MAX_NAME_CHARS].lstrip("._")
    return f"{readable}-{hashlib.sha1(unit_id.encode()).hexdigest()[:10]}"


def unit_file(output: str | Path, folder: str, unit_id: str) -> Path:
    """OUTPUT/<folder>/<unit>.parquet: a unit's embeddings, tokens or rejected rows."""
    return Path(output) / folder / f"{safe_name(unit_id)}.parquet"


def manifest_record(output: str | Path, unit_id: str) -> Path:
    return Path(output) / MANIFEST_FOLDER / f"{safe_name(unit_id)}.json"
