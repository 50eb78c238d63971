"""The Spark merge of a staged window into per-table Delta Lake tables, split by concept.

- :mod:`.window`: the staged window as the merge reads it (tables, keys, staged and target schemas);
- :mod:`.schema`: schema evolution of an existing table (planning, refusal of what it cannot follow);
- :mod:`.transforms`: the Spark transformations (pure functions of DataFrames);
- :mod:`.delta`: creating a target table, its layout, the window's commit;
- :mod:`.files`: new bucket files (validated footers, placement, cleanup);
- :mod:`.cascades`: foreign-key actions the source did not log;
- :mod:`.table`: merging one table (orchestration of the above);
- :mod:`.job`: merging a window, the command line and ``application(argv)``.
"""

from __future__ import annotations
