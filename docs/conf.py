"""Sphinx configuration of the provider's documentation (``make docs``).

The pages are Markdown (MyST). The how-to pages include the example DAGs between their
``[START howto_...]`` / ``[END howto_...]`` markers with ``literalinclude``, as the official Airflow
providers' documentation does, so a how-to always shows the code the tests run.
"""

from __future__ import annotations

from airflow_provider_binlog import __version__

project = "airflow-provider-binlog"
release = __version__
author = "airflow-provider-binlog contributors"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
html_theme = "alabaster"
html_title = f"{project} {release}"
