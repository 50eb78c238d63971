"""What the pipeline's operators share to answer OpenLineage (``docs/lineage.md``).

The datasets and facets are built by :mod:`airflow_provider_binlog.lineage`, which needs
``apache-airflow-providers-openlineage``; this module does not import it, so the operators import without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_binlog.contract.manifest import Manifest


class StagedLineageMixin:
    """Remember the manifest a run staged or applied, and name the pipeline's source for OpenLineage.

    ``execute`` sets :attr:`staged_manifest` and :attr:`staged_uri`; the operator's
    ``get_openlineage_facets_on_complete`` builds its datasets from them (none when the run stopped first).
    """

    pipeline: str
    binlog_conn_id: str
    staged_manifest: Manifest | None = None
    """The window's or snapshot's manifest this run staged, merged or committed."""
    staged_uri: str | None = None
    """The staging folder of :attr:`staged_manifest`."""

    def remember_staged(self, manifest: Manifest, uri: str) -> None:
        """Record the manifest and staging folder of the run for its OpenLineage events."""
        self.staged_manifest, self.staged_uri = manifest, uri

    def source_namespace(self) -> str:
        """Return the OpenLineage namespace of the source, ``mysql://<host>:<port>`` of ``binlog_conn_id``."""
        from airflow_provider_binlog.hooks.binlog import BinlogHook
        from airflow_provider_binlog.lineage import source_namespace

        settings = BinlogHook(self.binlog_conn_id, pipeline=self.pipeline).connection_settings()
        return source_namespace(settings["host"], settings["port"])

    def selected_tables(self, tables: Any) -> list[str]:
        """Return the entries of a table selection (none while it is an unrendered template)."""
        from airflow_provider_binlog.pipeline.tables import is_template, parse_tables

        return [] if is_template(tables) else parse_tables(tables)
