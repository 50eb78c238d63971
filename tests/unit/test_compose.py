"""Checks of docker-compose.yaml: compose's own validation, then the invariants of the demo stack.

No Docker engine is needed: ``docker-compose config -q`` only parses, interpolates and validates the file
against the Compose schema, and the other tests read the file with ``yaml.safe_load``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yaml"
DOCKER_DIR = ROOT / "docker"

AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
SPARK_SERVICES = ("spark-master", "spark-worker")
ONE_SHOT_SERVICES = ("airflow-init",)

MYSQL_FLAGS = (
    "--gtid-mode=ON",
    "--enforce-gtid-consistency=ON",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--binlog-expire-logs-seconds=86400",
    "--server-id=1",
    "--binlog-transaction-compression=OFF",
)
BINLOG_ENV = {
    "BINLOG_CDC_PIPELINE": "shop_cdc",
    "BINLOG_CDC_TABLES": "shop.*",
    "BINLOG_CDC_STAGING": "/data/staging",
    "BINLOG_CDC_TARGET": "/data/target",
}
DEPENDS_ON_CONDITIONS = {"service_healthy", "service_completed_successfully"}
SLEEP = re.compile(r"\bsleep\b")


def compose_command() -> list[str]:
    """Return the compose CLI: Debian's ``docker-compose`` (v1), else a working ``docker compose`` plugin."""
    legacy = shutil.which("docker-compose")
    if legacy:
        return [legacy]
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, check=False)
        if probe.returncode == 0:
            return [docker, "compose"]
    pytest.fail(
        "neither `docker-compose` nor the `docker compose` plugin is available to validate "
        "docker-compose.yaml: install Debian's docker-compose (make setup does)"
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def depends_on(service: dict[str, Any]) -> dict[str, Any]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        # The short form means "service_started": no readiness guarantee.
        return {name: {"condition": "service_started"} for name in deps}
    return deps


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(str(item) for item in value)
    return str(value)


def has_healthcheck(service: dict[str, Any]) -> bool:
    check = service.get("healthcheck") or {}
    test = check.get("test")
    return bool(test) and not check.get("disable") and as_text(test).strip() != "NONE"


def volume_targets(service: dict[str, Any]) -> dict[str, str]:
    """Return ``{container path: source}`` of a service's volumes (short or long syntax)."""
    targets = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            targets[volume["target"]] = str(volume.get("source", ""))
        else:
            source, target = volume.split(":")[:2]
            targets[target] = source
    return targets


def pyspark_pin() -> str:
    """Return the pyspark version pinned by the provider's ``spark`` extra in pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text()
    match = re.search(r'^spark\s*=\s*\[\s*"pyspark==([^"]+)"', text, re.MULTILINE)
    assert match, 'pyproject.toml has no `spark = ["pyspark==<version>"]` extra'
    return match.group(1)


def dockerfile_arg(path: Path, name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", path.read_text(), re.MULTILINE)
    assert match, f"{path.relative_to(ROOT)} has no default for ARG {name}"
    return match.group(1)


def test_compose_config_is_valid() -> None:
    result = subprocess.run(
        [*compose_command(), "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"compose rejected docker-compose.yaml:\n{result.stdout}{result.stderr}"
    # Unset variables without a default are only a warning for compose; here they are an error.
    assert "WARN" not in result.stderr.upper(), result.stderr


def test_stack_has_all_services(services: dict[str, dict[str, Any]]) -> None:
    expected = {"mysql", "postgres", *SPARK_SERVICES, *AIRFLOW_SERVICES}
    assert expected <= set(services), f"missing services: {sorted(expected - set(services))}"
    assert services["mysql"]["image"] == "mysql:8.4"
    assert services["postgres"]["image"] == "postgres:16"


def test_depends_on_waits_for_health_or_completion(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for target, spec in depends_on(service).items():
            assert target in services, f"{name} depends on unknown service {target}"
            condition = (spec or {}).get("condition", "service_started")
            assert condition in DEPENDS_ON_CONDITIONS, (
                f"{name} -> {target}: condition {condition!r}; use service_healthy (long-running "
                "services) or service_completed_successfully (one-shot jobs)"
            )
            if condition == "service_healthy":
                assert has_healthcheck(services[target]), (
                    f"{name} waits for {target}, which has no healthcheck"
                )
            else:
                restart = str(services[target].get("restart", "no"))
                assert restart in ("no", "on-failure") or restart.startswith("on-failure"), (
                    f"{name} waits for {target} to complete, but restart={restart!r} would rerun it forever"
                )


def test_every_service_with_dependants_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    dependants: dict[str, list[str]] = {}
    for name, service in services.items():
        for target in depends_on(service):
            dependants.setdefault(target, []).append(name)
    assert dependants, "no service declares depends_on"
    for target, names in sorted(dependants.items()):
        if target in ONE_SHOT_SERVICES:
            # A one-shot job is waited for with service_completed_successfully, not a healthcheck.
            continue
        assert has_healthcheck(services[target]), f"{target} (needed by {names}) has no healthcheck"


def test_long_running_services_have_healthchecks(services: dict[str, dict[str, Any]]) -> None:
    missing = [n for n, s in services.items() if n not in ONE_SHOT_SERVICES and not has_healthcheck(s)]
    assert not missing, f"services without a healthcheck: {missing}"


def test_no_sleep_anywhere(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for key in ("command", "entrypoint"):
            assert not SLEEP.search(as_text(service.get(key))), f"{name}: `sleep` in {key}"
        test = as_text((service.get("healthcheck") or {}).get("test"))
        assert not SLEEP.search(test), f"{name}: `sleep` in healthcheck"
    for path in sorted(p for p in DOCKER_DIR.rglob("*") if p.is_file()):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0] if path.suffix != ".sql" else line.split("--", 1)[0]
            assert not SLEEP.search(code), f"{path.relative_to(ROOT)}:{number}: `sleep`: {line.strip()}"


def test_mysql_is_a_usable_binlog_source(services: dict[str, dict[str, Any]]) -> None:
    mysql = services["mysql"]
    command = mysql["command"]
    flags = command if isinstance(command, list) else command.split()
    missing = [flag for flag in MYSQL_FLAGS if flag not in flags]
    assert not missing, f"mysql command lacks {missing}"
    assert "mysqladmin ping" in as_text(mysql["healthcheck"]["test"])
    mounts = volume_targets(mysql)
    assert mounts.get("/docker-entrypoint-initdb.d") == "./docker/mysql-init"


def test_init_scripts_create_the_replication_user() -> None:
    scripts = "\n".join(p.read_text() for p in sorted((DOCKER_DIR / "mysql-init").iterdir()))
    grant = re.search(r"GRANT\s+(.+?)\s+ON\s+\*\.\*", scripts, re.IGNORECASE)
    assert grant, "no GRANT ... ON *.* in docker/mysql-init"
    privileges = {p.strip().upper() for p in grant.group(1).split(",")}
    assert privileges == {"REPLICATION SLAVE", "REPLICATION CLIENT", "SELECT"}
    assert "CDC_PASSWORD" in scripts, "the cdc password must come from the environment"


def test_airflow_services_share_settings(services: dict[str, dict[str, Any]]) -> None:
    for name in AIRFLOW_SERVICES:
        env = environment(services[name])
        for key, value in BINLOG_ENV.items():
            assert env.get(key) == value, f"{name}: {key}={env.get(key)!r}, expected {value!r}"
        assert env.get("AIRFLOW__CORE__EXECUTOR") == "LocalExecutor", name
        assert env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "").startswith("postgresql"), name
        assert "@postgres:" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], name
        assert env.get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "").startswith(
            "http://airflow-apiserver:8080/"
        ), name
        assert env.get("AIRFLOW__API_AUTH__JWT_SECRET"), f"{name}: the JWT secret must be shared"
        assert services[name]["build"]["dockerfile"] == "docker/airflow/Dockerfile", name


def test_airflow_components(services: dict[str, dict[str, Any]]) -> None:
    commands = {name: as_text(services[name].get("command")) for name in AIRFLOW_SERVICES}
    assert commands["airflow-apiserver"] == "api-server"
    assert commands["airflow-scheduler"] == "scheduler"
    assert commands["airflow-dag-processor"] == "dag-processor"
    assert commands["airflow-triggerer"] == "triggerer"
    assert "8080:8080" in services["airflow-apiserver"]["ports"]
    assert "/api/v2/monitor/health" in as_text(services["airflow-apiserver"]["healthcheck"]["test"])
    for name in AIRFLOW_SERVICES[1:]:
        condition = depends_on(services[name])["airflow-init"]["condition"]
        assert condition == "service_completed_successfully", name


def test_init_creates_connections_and_migrates(services: dict[str, dict[str, Any]]) -> None:
    script = " ".join(as_text(services["airflow-init"].get("command")).replace("\\\n", " ").split())
    assert "airflow db migrate" in script
    assert (
        "connections add binlog_default --conn-type mysqlbinlog --conn-host mysql --conn-port 3306" in script
    )
    assert (
        "connections add spark_default --conn-type spark --conn-host spark://spark-master --conn-port 7077"
        in (script)
    )


def test_cdc_data_volume_is_shared(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    assert "cdc-data" in (compose.get("volumes") or {})
    for name in (*AIRFLOW_SERVICES, *SPARK_SERVICES):
        assert volume_targets(services[name]).get("/data") == "cdc-data", f"{name} does not mount cdc-data"


def test_spark_cluster(services: dict[str, dict[str, Any]]) -> None:
    master, worker = services["spark-master"], services["spark-worker"]
    assert "org.apache.spark.deploy.master.Master" in as_text(master["command"])
    assert "8081:8080" in master["ports"]
    assert "org.apache.spark.deploy.worker.Worker" in as_text(worker["command"])
    assert "spark://spark-master:7077" in as_text(worker["command"])
    for service in (master, worker):
        assert service["build"]["context"] == "docker/spark"


def test_driver_and_cluster_versions_match(services: dict[str, dict[str, Any]]) -> None:
    """The Spark driver (Airflow image) and the cluster must run the same Spark and Python versions."""
    pin = pyspark_pin()
    airflow_args = services["airflow-scheduler"]["build"]["args"]
    spark_args = services["spark-worker"]["build"]["args"]
    for image, args in (("airflow", airflow_args), ("spark", spark_args)):
        assert str(args["PYSPARK_VERSION"]) == pin, (
            f"the {image} image is built with PYSPARK_VERSION={args['PYSPARK_VERSION']}, but the `spark` "
            f"extra pins pyspark=={pin}"
        )
    assert str(airflow_args["PYTHON_VERSION"]) == str(spark_args["PYTHON_VERSION"]), (
        "the Airflow image (Spark driver) and the Spark image (executors) need the same Python minor version"
    )
    for dockerfile in (DOCKER_DIR / "airflow" / "Dockerfile", DOCKER_DIR / "spark" / "Dockerfile"):
        assert dockerfile_arg(dockerfile, "PYSPARK_VERSION") == pin, dockerfile
        assert dockerfile_arg(dockerfile, "PYTHON_VERSION") == str(airflow_args["PYTHON_VERSION"]), dockerfile


EXECUTOR_ENTRY = ROOT / "airflow_provider_binlog" / "snapshot" / "chunks.py"
"""What Spark executors run of the provider: the snapshot's chunk read task (``mapInArrow``). The merge's
Python code runs in the driver, the Airflow image."""


def executor_imports(entry: Path) -> set[str]:
    """Return the top-level third-party modules ``entry`` and the provider modules it imports can import.

    Every import counts, also inside functions (mysqlclient is imported where rows are read); imports under
    ``if TYPE_CHECKING:`` do not run and are left out.
    """
    import ast
    import sys

    package = ROOT / "airflow_provider_binlog"
    found: set[str] = set()
    seen: set[Path] = set()
    todo = [entry]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = ast.parse(path.read_text())
        skipped = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in skipped or not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.startswith("airflow_provider_binlog"):
                    module = ROOT.joinpath(*name.split("."))
                    todo += [p for p in (module.with_suffix(".py"), module / "__init__.py") if p.exists()]
                elif name and name.split(".")[0] not in sys.stdlib_module_names and name != "__future__":
                    found.add(name.split(".")[0])
    assert seen & {package / "snapshot" / "rows.py"}, "the chunk reader no longer imports snapshot/rows.py"
    return found


def test_the_spark_image_installs_what_executors_import() -> None:
    # A chunk read task on the compose Spark cluster imports these; a missing one fails every snapshot there.
    import importlib.metadata

    distributions = importlib.metadata.packages_distributions()
    needed = {
        distributions[module][0].lower() for module in executor_imports(EXECUTOR_ENTRY) if module != "pyspark"
    }
    installed = {
        re.split(r"[<>=!~\[ ]", spec.strip('"'), maxsplit=1)[0].lower()
        for spec in re.findall(
            r'"[A-Za-z][A-Za-z0-9_.\-]*(?:\[[^\]]*\])?[<>=!~][^"]*"',
            (DOCKER_DIR / "spark" / "Dockerfile").read_text(),
        )
    }
    assert needed <= installed, f"docker/spark/Dockerfile does not install {sorted(needed - installed)}"
