"""Delta readers other than the provider's own, for tests and benchmarks that check what users' engines see.

DuckDB's ``delta`` extension is normally downloaded by DuckDB from extensions.duckdb.org at first use; the test
extra installs it from PyPI instead (``duckdb-extension-delta``, the extension binary for one DuckDB release,
which is why the extra pins ``duckdb`` to that release), so tests and benchmarks need no network.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def duckdb_delta() -> Any | None:
    """Return a new in-memory DuckDB connection with the ``delta`` extension loaded (``delta_scan``).

    :returns: the connection, or None when ``duckdb`` or ``duckdb-extension-delta`` is not installed (or the
        package holds no extension binary).
    :raises duckdb.Error: when the extension does not load (built for another DuckDB release).
    """
    try:
        import duckdb
        import duckdb_extension_delta
    except ImportError:
        return None
    found = sorted(Path(duckdb_extension_delta.__file__).parent.glob("extensions/*/delta.duckdb_extension"))
    if not found:
        return None
    con = duckdb.connect()
    con.execute(f"LOAD '{found[0]}'")
    return con
