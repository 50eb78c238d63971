"""The window read's garbage-collector setting (``extract.heap.frozen_heap``)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from airflow_provider_binlog.extract.heap import frozen_heap


def test_the_heap_is_frozen_during_the_read_and_thawed_after_even_on_errors() -> None:
    gc.unfreeze()
    with frozen_heap():
        assert gc.get_freeze_count() > 0  # the objects that existed on entry
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), frozen_heap():
        raise RuntimeError("the read failed")
    assert gc.get_freeze_count() == 0


def test_a_heap_frozen_by_someone_else_is_left_as_it_is() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()  # frozen objects freed meanwhile make it drop: compare with margins
        created_since = [[] for _ in range(1000)]  # tracked objects a second gc.freeze() would add
        with frozen_heap():
            assert 0 < gc.get_freeze_count() < frozen + len(created_since)  # not frozen again
        assert gc.get_freeze_count() > 0  # not unfrozen
    finally:
        gc.unfreeze()


def test_a_process_frozen_for_good_is_left_as_it_is_without_counting_its_frozen_objects() -> None:
    # In a process of its own: freeze_for_good() lasts for the rest of the process. Counting the frozen
    # objects walks them all (about 40 ms per file a parallel read's worker read), so it must not happen.
    script = """
import gc
import subprocess
import sys
from airflow_provider_binlog.extract.heap import freeze_for_good, frozen_heap
freeze_for_good()
frozen = gc.get_freeze_count()
def uncounted():
    raise AssertionError("frozen_heap counted the frozen objects")
gc.get_freeze_count, count = uncounted, gc.get_freeze_count
with frozen_heap():
    pass
assert count() >= frozen > 0, (count(), frozen)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
