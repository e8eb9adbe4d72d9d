"""deploy/: the Dockerfile, the compose file and the Helm values agree with each other and with
what the code reads. No Docker engine or cluster here: they are parsed and cross-checked, and
every command they start is run with --help from this checkout's environment."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
BIN = REPO / ".venv" / "bin"


def load(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments), continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    return [tuple(line.split(None, 1)) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def code_reads(var: str) -> bool:
    """Whether the project's code names the variable (settings, resources, the CLI)."""
    sources = [*REPO.glob("pipeline/**/*.py"), *REPO.glob("assets/**/*.py"),
               *REPO.glob("resources/**/*.py")]
    return any(f'"{var}"' in p.read_text() for p in sources)


COMPOSE = load("compose.yaml")
SERVICES = COMPOSE["services"]
HELM = load("helm-values.yaml")
OURS = {n: s for n, s in SERVICES.items() if s.get("image") == "ledgerlake:0.1.0"}


def env_of(service: dict) -> dict:
    return service.get("environment") or {}


def test_the_image_is_built_frozen_runs_as_a_user_and_enters_through_a_file_that_exists():
    steps = dockerfile()
    runs = " ".join(a for i, a in steps if i == "RUN")
    assert "uv sync --frozen" in runs and "--no-dev" in runs
    user = [a for i, a in steps if i == "USER"]
    assert user and user[-1] not in ("root", "0")
    for instruction, args in steps:
        if instruction == "COPY" and "--from" not in args:
            for source in shlex.split(args)[:-1]:
                assert (REPO / source).exists(), source
    (entry,) = [a for i, a in steps if i == "ENTRYPOINT"]
    script = yaml.safe_load(entry)[-1]  # JSON form: ["python", "/app/deploy/entrypoint.py"]
    assert (REPO / script.removeprefix("/app/")).is_file()
    # the production profile is what DAGSTER_HOME holds in the image
    assert "cp deploy/dagster.yaml /opt/dagster/home/dagster.yaml" in runs
    assert "DAGSTER_HOME=/opt/dagster/home" in " ".join(a for i, a in steps if i == "ENV")


def test_compose_runs_every_part_of_the_deployment_from_the_one_image():
    commands = {n: s["command"] for n, s in OURS.items()}
    receivers = [n for n, c in commands.items() if c[:2] == ["ledgerlake", "receiver"]]
    assert len(receivers) >= 2
    assert {"code-location", "webserver", "daemon"} <= set(OURS)
    assert commands["daemon"][:2] == ["dagster-daemon", "run"]
    assert commands["webserver"][0] == "dagster-webserver"
    assert "postgres" in SERVICES and "minio" in SERVICES
    for service in OURS.values():
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (DEPLOY / service["build"]["context"] / "deploy" / "Dockerfile").is_file()


def test_compose_points_dagster_and_the_workspace_at_its_own_services():
    pg = SERVICES["postgres"]["environment"]
    for name in ("code-location", "webserver", "daemon", "instance"):
        env = env_of(OURS[name])
        assert env["DAGSTER_PG_HOST"] == "postgres" and env["DAGSTER_PG_PORT"] == "5432"
        assert env["DAGSTER_PG_USER"] == pg["POSTGRES_USER"]
        assert env["DAGSTER_PG_DB"] == pg["POSTGRES_DB"]
        assert env["DAGSTER_PG_PASSWORD"] == pg["POSTGRES_PASSWORD"]  # the same ${...}
    (location,) = load("workspace.yaml")["load_from"]
    grpc = location["grpc_server"]
    code = OURS["code-location"]["command"]
    assert grpc["host"] == "code-location"
    assert str(grpc["port"]) == code[code.index("-p") + 1]
    assert code[code.index("-m") + 1] == "pipeline.definitions"
    for name in ("webserver", "daemon"):
        cmd = OURS[name]["command"]
        assert cmd[cmd.index("-w") + 1] == "/app/deploy/workspace.yaml"
    # the service's pool gets its limit before the code location starts runs
    assert OURS["instance"]["command"][:5] == ["dagster", "instance", "concurrency", "set",
                                               "connection_service"]
    assert "instance" in OURS["code-location"]["depends_on"]


def test_secrets_are_never_written_in_the_files():
    for name in ("compose.yaml", "helm-values.yaml"):
        text = (DEPLOY / name).read_text()
        for var in ("DAGSTER_PG_PASSWORD", "LEDGERLAKE_SECRET_KEY", "AWS_SECRET_ACCESS_KEY",
                    "LEDGERLAKE_RECEIVER_TOKEN"):
            for value in re.findall(rf"^\s*{var}:\s*(\S+)", text, re.M):
                assert value.startswith("${"), (name, var, value)
    for service in SERVICES.values():
        for key, value in env_of(service).items():
            if any(word in key for word in ("PASSWORD", "SECRET", "TOKEN")):
                assert str(value).startswith("${"), key


def helm_env() -> dict[str, str]:
    (deployment,) = HELM["dagster-user-deployments"]["deployments"]
    return {e["name"]: e["value"] for e in deployment["env"]}


def test_every_ledgerlake_variable_set_is_one_the_code_reads():
    names = set(helm_env())
    for service in OURS.values():
        names |= set(env_of(service))
    ours = sorted(n for n in names if n.startswith("LEDGERLAKE_"))
    assert "LEDGERLAKE_LAKE" in ours and "LEDGERLAKE_INBOX" in ours
    assert [n for n in ours if not code_reads(n)] == []


def test_the_settings_compose_and_helm_give_are_ones_the_settings_accept():
    from resources.config import Settings

    compose = env_of(OURS["code-location"])
    for env in (compose, helm_env()):
        given = {k: v for k, v in env.items() if k.startswith("LEDGERLAKE_")
                 and k in ("LEDGERLAKE_LAKE", "LEDGERLAKE_WAREHOUSE", "LEDGERLAKE_ENVIRONMENT",
                           "LEDGERLAKE_TIMEZONE", "LEDGERLAKE_HOME")}
        settings = Settings.from_env(given)
        assert settings.lake.startswith("s3://") and settings.environment == "production"


def test_the_helm_values_launch_runs_as_pods_of_the_image_with_the_instance_settings():
    default = yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert HELM["runLauncher"]["type"] == "K8sRunLauncher"
    (deployment,) = HELM["dagster-user-deployments"]["deployments"]
    args = deployment["dagsterApiGrpcArgs"]
    module = args[args.index("--module-name") + 1]
    assert module == "pipeline.definitions" and importlib.util.find_spec(module)
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is True
    assert deployment["image"]["tag"] == OURS["code-location"]["image"].split(":")[1]
    assert deployment["securityContext"]["runAsUser"] == 10001  # the image's user
    secrets = [s["name"] for s in deployment["envSecrets"]]
    assert secrets == [s["name"] for s in
                       HELM["runLauncher"]["config"]["k8sRunLauncher"]["envSecrets"]]
    assert HELM["postgresql"]["enabled"] is False and HELM["global"]["postgresqlSecretName"]
    daemon = HELM["dagsterDaemon"]
    assert daemon["runCoordinator"]["type"] == "QueuedRunCoordinator"
    retries = default["run_retries"]
    assert daemon["runRetries"] == {"enabled": retries["enabled"],
                                    "maxRetries": retries["max_retries"],
                                    "retryOnAssetOrOpFailure":
                                        retries["retry_on_asset_or_op_failure"]}
    logs = default["python_logs"]
    assert HELM["pythonLogs"] == {"managedPythonLoggers": logs["managed_python_loggers"],
                                  "pythonLogLevel": logs["python_log_level"]}
    assert HELM["telemetry"]["enabled"] is default["telemetry"]["enabled"]


@pytest.mark.parametrize("service", ["code-location", "webserver", "daemon", "receiver-1",
                                     "instance", "metrics"])
def test_each_command_the_compose_file_starts_exists_here(service):
    cmd = OURS[service]["command"]
    words = [w for w in cmd if not w.startswith("-")][:4]
    if service == "instance":
        words = cmd[:4]  # `dagster instance concurrency set`
    elif words[0] == "dagster":
        words = words[:3]  # `dagster code-server start`
    else:
        words = words[:2] if words[0] == "ledgerlake" else words[:1 + (words[1] == "run")]
    out = subprocess.run([str(BIN / words[0]), *words[1:], "--help"], capture_output=True,
                         text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-1000:]
    for flag in (w for w in cmd if w.startswith("-")):
        assert flag in out.stdout, (service, flag)


def test_a_receiver_in_a_container_may_listen_on_every_interface():
    from pipeline.cli import build_parser

    args = build_parser().parse_args(OURS["receiver-1"]["command"][1:])
    assert args.command == "receiver" and args.host == "0.0.0.0"
