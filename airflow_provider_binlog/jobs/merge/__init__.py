"""The Spark merge of a staged window into per-table Delta Lake tables, split by concept.

- :mod:`.window`: the staged window as the merge reads it (tables, keys, staged and target schemas);
- :mod:`.plan`: one window's merge plan, made before any table is merged (its tables in merge order, their
  staged files, schemas, keys and truncate markers, the cascades' files);
- :mod:`.schema`: schema evolution of an existing table (planning, refusal of what it cannot follow);
- :mod:`.transforms`: the Spark transformations (pure functions of DataFrames);
- :mod:`.delta`: creating a target table, its layout, the window's commit;
- :mod:`.files`: new data files (written sorted by key, validated footers, placement, cleanup);
- :mod:`.merge_on_read`: a window written as new rows plus deletion vectors of the rows they replace
  (``docs/adr/0037-deletion-vectors.md``);
- :mod:`.result`: what merging one table did (the summary entry and its commit info);
- :mod:`.cascades`: foreign-key actions the source did not log;
- :mod:`.truncate`: truncate markers (a table emptied at a statement's place in the order);
- :mod:`.table`: merging one table as the plan says (orchestration of the above);
- :mod:`.job`: merging a window (plan, then apply), the command line and ``application(argv)``.
"""

from __future__ import annotations
