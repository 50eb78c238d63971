"""Copies of the last revisions of a pipeline's state document, kept beside its staging.

Every write of the state Variable by an operator that knows the pipeline's staging also writes
``<staging>/<pipeline>/_state/revision=<revision>.json`` and keeps the newest :data:`KEPT_REVISIONS`.
The Variable stays the one source of truth; the copies are what
``python -m airflow_provider_binlog.admin restore`` puts back after a bad hand edit or a lost
Variable (``docs/operating.md``, "Pipeline state").
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from airflow_provider_binlog.pipeline.ledger import PipelineState

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

log = logging.getLogger(__name__)

KEPT_REVISIONS = 20
"""How many revisions of a state document are kept beside the staging."""
FOLDER = "_state"
_NAME = re.compile(r"^revision=(\d+)\.json$")
_STAGED_SEQ = re.compile(r"^(?:window|snapshot)=(\d+)$")


class StagedStateHistory:
    """The kept revisions of one pipeline's state under ``<pipeline staging>/_state/``.

    :param pipeline_root: the pipeline's staging folder ``<staging>/<pipeline>``.
    """

    def __init__(self, pipeline_root: ObjectStoragePath) -> None:
        self.pipeline_root = pipeline_root
        self.folder = pipeline_root / FOLDER

    def keep(self, state: PipelineState) -> None:
        """Write ``state`` as ``revision=<n>.json`` and drop all but the newest :data:`KEPT_REVISIONS`.

        A failure is logged, not raised: the Variable was written already and stays authoritative.
        """
        from airflow_provider_binlog.pipeline.staging import write_atomically

        try:
            write_atomically(
                self.folder / f"revision={state.revision}.json", state.model_dump_json(indent=1).encode()
            )
            for revision in self.revisions()[:-KEPT_REVISIONS]:
                (self.folder / f"revision={revision}.json").unlink()
        except OSError as err:
            log.warning("could not keep revision %s of the state in %s: %s", state.revision, self.folder, err)

    def revisions(self) -> list[int]:
        """Return the kept revision numbers, oldest first."""
        if not self.folder.exists():
            return []
        found = (_NAME.match(path.name) for path in self.folder.iterdir())
        return sorted(int(match.group(1)) for match in found if match)

    def read(self, revision: int) -> PipelineState:
        """Return kept revision ``revision``.

        :raises FileNotFoundError: when it is not kept.
        :raises pydantic.ValidationError: when the copy is not a state document.
        """
        return PipelineState.model_validate_json((self.folder / f"revision={revision}.json").read_text())

    def highest_staged_seq(self) -> int:
        """Return the highest sequence number of a window or snapshot folder in the staging (0 if none)."""
        if not self.pipeline_root.exists():
            return 0
        found = (_STAGED_SEQ.match(path.name) for path in self.pipeline_root.iterdir())
        return max((int(match.group(1)) for match in found if match), default=0)
