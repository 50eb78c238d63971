"""The window read's garbage-collector setting (``extract.reader.frozen_heap``)."""

from __future__ import annotations

import gc

import pytest

from airflow_provider_binlog.extract.reader import frozen_heap


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
