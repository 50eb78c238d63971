"""Operator arguments that only the DAG's author may set: never from a DAG run's configuration.

A pipeline's identity (``pipeline``), what it reads (``tables``, ``keys``) and where it writes (``staging_uri``,
``target_path``) decide which rows of the source go where, with the credentials of the Airflow connections the
tasks hold. Airflow hands a DAG run's configuration to templates twice: as ``dag_run.conf``, and merged into
``params`` (``[core] dag_run_conf_overrides_params``, on by default: ``airflow.sdk.definitions.param.process_params``
updates the DAG's params with the run's conf, keys the DAG does not declare included). A template of these
arguments that reads either lets anyone allowed to trigger the DAG with a configuration copy any table the
source account can read to any location (``docs/adr/0034-trusted-pipeline-configuration.md``).

So the operators refuse, when the DAG is parsed, a template of a trusted argument that reads anything but
:data:`TRUSTED_TEMPLATE_NAMES`: Airflow Variables and connections (which only their editors change) and macros.
"""

from __future__ import annotations

from typing import Any

TRUSTED_TEMPLATE_NAMES = frozenset({"var", "conn", "macros"})
"""The template context names a trusted argument may read: ``{{ var.value.binlog_staging }}`` is fine,
``{{ params.staging }}``, ``{{ dag_run.conf['staging'] }}`` or ``{{ ti.xcom_pull(...) }}`` are not."""


def template_names(text: str) -> set[str]:
    """Return the top-level context names a Jinja template reads (``{{ params.x }}`` reads ``params``).

    :param text: the template text; text without ``{{`` or ``{%`` reads nothing.
    :raises ValueError: when the text is not a valid Jinja template.
    """
    if "{{" not in text and "{%" not in text:
        return set()
    import jinja2
    from jinja2 import meta

    try:
        return set(meta.find_undeclared_variables(jinja2.Environment().parse(text)))
    except jinja2.TemplateSyntaxError as err:
        raise ValueError(f"{text!r} is not a valid template: {err}") from err


def check_trusted_arguments(operator: Any, **arguments: Any) -> None:
    """Refuse a templated trusted argument that reads what a DAG run's trigger can set.

    :param operator: the operator being built (its class and task id name it in the message).
    :param arguments: ``argument name=value as given``; strings and lists of strings are checked, other
        values (dicts of keys, None) carry no template.
    :raises ValueError: naming the argument, the names its template reads and the remedy.
    """
    for name, value in arguments.items():
        read = sorted({n for text in _texts(value) for n in template_names(text)} - TRUSTED_TEMPLATE_NAMES)
        if read:
            raise ValueError(
                f"{type(operator).__name__} {getattr(operator, 'task_id', '')!r}: {name}={value!r} reads {', '.join(read)} from the run's context, which whoever may "
                f"trigger the DAG with a configuration can set (dag_run.conf overrides params): the pipeline's "
                f"{name} would follow them. Give it as a constant of the DAG file, or template it from an Airflow "
                f"Variable or connection (var, conn) only their editors change "
                f"(docs/adr/0034-trusted-pipeline-configuration.md)."
            )


def _texts(value: Any) -> list[str]:
    """Return the strings of an argument: itself, or the strings of a list or tuple."""
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list | tuple) else []
