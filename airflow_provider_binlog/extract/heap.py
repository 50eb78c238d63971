"""The garbage collector during a window read: the objects alive before it are kept out of full collections.

A window read allocates a container per row; Airflow's imports leave a large heap that every full collection
walks (ADR 0025, "Counting frozen objects").
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_frozen_for_good = False
"""True in a process that froze its heap for the rest of its life (:func:`freeze_for_good`)."""


def freeze_for_good() -> None:
    """Move every object now alive to the collector's permanent generation, for the rest of this process.

    For a forked worker (:func:`~airflow_provider_binlog.extract.file_worker.detach`): the objects it inherited
    are never collected there. :func:`frozen_heap` then changes nothing and skips ``gc.get_freeze_count()``,
    which walks every frozen object (CPython 3.11 ``gc_list_size``): about 40 ms per call on a task process's
    heap, once per file a worker read (measured with py-spy).
    """
    global _frozen_for_good
    gc.freeze()
    _frozen_for_good = True


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects that exist on entry out of the garbage collector's full collections until exit.

    The read allocates a container per row (the decoded images), so the collector runs its full (oldest
    generation) collection every few tens of thousands of rows, and each one walks every object of the
    process: Airflow's imports make that some 100 ms a time. On 240,000 OLTP rows that was about 1.4 s of
    CPU, a third of the read (``gc.callbacks``, one run). ``gc.freeze`` moves the existing objects to the
    permanent generation, which collections skip; ``gc.unfreeze`` puts them back in the oldest one on exit.
    Objects created during the read are collected as usual. When something else froze objects before
    (:func:`freeze_for_good`, or ``gc.get_freeze_count()`` is not 0: a parent that forks), nothing is changed,
    so as not to unfreeze theirs.
    """
    if _frozen_for_good or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
