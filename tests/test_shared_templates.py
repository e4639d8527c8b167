"""Store templates are built once per source content and shared by every process of a backend
(xdist workers, side-by-side sessions), read-only (issue 28). Real processes, as xdist runs them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

# stores/engine/folders.py: the shared templates beside the per-process folders
TEMPLATES = "_templates"

ROOT = Path(__file__).resolve().parents[1]

WORKER = """
import json, os, sys
from pathlib import Path
from stores.base import DatasetFiles
from stores.registry import load_store_class
backend, stores, parquet = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
store = load_store_class(backend)(stores / backend / str(os.getpid()))
store.setup_session()
item = store.provision(DatasetFiles(name="orders", parquet_dir=parquet))
session = item.connect()
rows = session.run_sql("SELECT count(*) FROM orders").rows
session.close()
item.teardown()
print(json.dumps({"pid": os.getpid(), "rows": rows[0][0]}))
"""


def _dataset(folder: Path) -> Path:
    folder.mkdir(parents=True)
    table = pa.table({"order_id": list(range(5000)), "amount": [i * 0.5 for i in range(5000)]})
    pq.write_table(table, folder / "orders.parquet")
    return folder


def _workers(backend: str, stores: Path, parquet: Path, n: int) -> list[dict[str, int]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, backend, str(stores), str(parquet)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        out.append(json.loads(stdout.splitlines()[-1]))
    return out


@pytest.mark.parametrize("backend", ["lake-parquet", "duckdb", "files"])
def test_processes_share_one_read_only_template_per_content(backend: str, tmp_path: Path) -> None:
    stores = tmp_path / "stores"
    first = _dataset(tmp_path / "a")
    ran = _workers(backend, stores, first, 3)  # three processes at once
    assert [r["rows"] for r in ran] == [5000, 5000, 5000]
    shared = stores / backend / TEMPLATES
    built = [p for p in shared.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(built) == 1, built  # one template for the three processes
    (template,) = built
    assert not os.access(template, os.W_OK) or os.geteuid() == 0
    assert template.stat().st_mode & 0o777 == 0o555
    assert all(p.stat().st_mode & 0o777 == 0o444 for p in template.iterdir() if p.is_file())
    assert not any(p.name.endswith(".tmp") for p in shared.iterdir())  # no build left half-way

    # the same bytes elsewhere (another checkout, a regenerated identical world) share it too
    same = tmp_path / "b"
    shutil.copytree(first, same)
    _workers(backend, stores, same, 1)
    assert sorted(p.name for p in shared.iterdir() if p.is_dir()) == [template.name]

    # changed bytes get a template of their own
    changed = tmp_path / "c"
    changed.mkdir()
    pq.write_table(pa.table({"order_id": [1, 2, 3]}), changed / "orders.parquet")
    (other,) = _workers(backend, stores, changed, 1)
    assert other["rows"] == 3
    assert len([p for p in shared.iterdir() if p.is_dir()]) == 2
    # every process's own folder holds no template
    assert not any((p / TEMPLATES).exists() for p in (stores / backend).iterdir())
