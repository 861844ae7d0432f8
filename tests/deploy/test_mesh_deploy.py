"""The mesh process (``manage.py mesh``) in the deployments other than the Helm chart: Compose, systemd
and ``make stack`` (the chart's are in test_helm_chart.py).

Read from the files, nothing started but deploy/stack.sh up to the checks it makes before it starts
anything: the mesh service is behind its own Compose profile, follows the registry service and
publishes the ports its settings name; the systemd unit is the reader's unit with another command;
``make stack MESH=1`` picks its ports from PORT, says which, and refuses ports that cannot work. The
settings each file gives are parsed by the registry's own config, so a misspelt value fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from registry.config.eureka import parse_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

# ------------------------------------------------------------------------------------- Compose


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ``${NAME:-default}`` (nested defaults too) and ``${NAME}``, as `docker compose` reads
    the file with ``variables`` in deploy/.env."""
    pattern = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::-((?:[^{}]|\{[^{}]*\})*))?\}")
    while True:
        replaced = pattern.sub(
            lambda m: variables.get(m.group(1)) or interpolate(m.group(2) or "", variables), value
        )
        if replaced == value:
            return value
        value = replaced


def test_interpolate_reads_nested_defaults_as_compose_does():
    assert interpolate("${A:-${B:-x}}", {}) == "x"
    assert interpolate("${A:-${B:-x}}", {"B": "b"}) == "b"
    assert interpolate("${A:-${B:-x}}", {"A": "a", "B": "b"}) == "a"
    assert interpolate("${A:-${B:-x}}", {"A": ""}) == "x", ":- also replaces an empty value"


def test_the_mesh_service_is_only_started_with_its_profile(compose):
    services = compose["services"]
    mesh = services["mesh"]
    assert mesh["profiles"] == ["mesh"], "`docker compose up` without --profile mesh stays as it was"
    default = {name for name, service in services.items() if not service.get("profiles")}
    assert default == {"registry", "celery-worker", "celery-beat", "reader", "nginx", "redis", "postgres"}
    for name in default:
        environment = services[name].get("environment", {})
        assert not [key for key in environment if key.startswith(("EUREKA_XDS_", "EUREKA_DNS_"))], name


def test_the_mesh_service_runs_manage_py_mesh_from_the_registrys_image(compose):
    registry, mesh = compose["services"]["registry"], compose["services"]["mesh"]
    assert mesh["command"] == ["python", "manage.py", "mesh"]
    assert (mesh["image"], mesh["build"], mesh["env_file"]) == (
        registry["image"],
        registry["build"],
        registry["env_file"],
    )
    # The settings every app container gets (database for API accounts, TLS lines), then its own.
    common = {
        k: v
        for k, v in mesh["environment"].items()
        if not k.startswith(("EUREKA_MESH_", "EUREKA_XDS_", "EUREKA_DNS_"))
    }
    assert common == registry["environment"]
    assert mesh["depends_on"]["registry"] == {"condition": "service_healthy"}


def test_the_mesh_service_follows_the_registry_service_and_publishes_its_ports(compose):
    services = compose["services"]
    mesh = services["mesh"]
    env = {
        key: interpolate(str(value), {"POSTGRES_PASSWORD": "pw"})
        for key, value in mesh["environment"].items()
    }
    # The registry service's name and the port it listens on inside the network.
    assert env["EUREKA_MESH_NODE_URL"] == "http://registry:8761"
    assert "8761:8761" in services["registry"]["ports"]
    config = parse_config(env).mesh
    assert config.node_url == "http://registry:8761"
    assert (config.xds_port, config.dns_port) == (18000, 8600)
    assert config.dns_bind == "0.0.0.0", "the container's loopback is of no use to anyone else"
    # DNS answers the project's network (the host's queries come from its gateway), or what .env says.
    assert config.dns_allowed_networks == ("172.28.0.0/16",)
    subnet = compose["networks"]["default"]["ipam"]["config"][0]["subnet"]
    assert interpolate(subnet, {}) == "172.28.0.0/16"
    moved = {"EUREKA_COMPOSE_SUBNET": "10.9.0.0/16"}
    assert interpolate(mesh["environment"]["EUREKA_DNS_ALLOWED_NETWORKS"], moved) == "10.9.0.0/16"
    chosen = {"EUREKA_DNS_ALLOWED_NETWORKS": "10.0.0.0/8,192.168.0.0/16"}
    assert (
        interpolate(mesh["environment"]["EUREKA_DNS_ALLOWED_NETWORKS"], chosen) == "10.0.0.0/8,192.168.0.0/16"
    )
    assert sorted(mesh["ports"]) == sorted(["18000:18000", "8600:8600/udp", "8600:8600/tcp"])
    check = mesh["healthcheck"]["test"][-1]
    assert "18000" in check and "8600" in check, "the health check connects to both ports"


def test_env_example_lists_the_mesh_settings_commented_out():
    text = (DEPLOY / ".env.example").read_text()
    lines = dict(re.findall(r"^#([A-Z][A-Z0-9_]+)=(.*)$", text, re.M))
    # Commented out: a deploy/.env copied from it leaves the defaults of each deployment in force.
    assert lines["EUREKA_XDS_PORT"] == "0" and lines["EUREKA_DNS_PORT"] == "0"
    assert not re.search(r"^EUREKA_(XDS|DNS_PORT|DNS_BIND|MESH)", text, re.M)
    defaults = parse_config({}).mesh
    assert lines["EUREKA_DNS_BIND"] == defaults.dns_bind
    assert lines["EUREKA_DNS_DOMAIN"] == defaults.dns_domain
    assert int(lines["EUREKA_XDS_STREAMS_MAX"]) == defaults.xds_streams_max


# ------------------------------------------------------------------------------------- systemd


def unit(name: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of each setting of a unit file, in order (keys may repeat)."""
    section, settings = "", []
    for line in (DEPLOY / "systemd" / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.append((section, key, value))
    return settings


def test_the_mesh_unit_is_the_readers_with_its_own_command():
    mesh, reader = unit("eureka-mesh.service"), unit("eureka-reader.service")
    assert [value for _, key, value in mesh if key == "ExecStart"] == [
        "/opt/eureka/.venv/bin/python manage.py mesh"
    ]
    # Who it runs as, where, with which settings, and the same sandbox.
    same = {
        "User", "Group", "WorkingDirectory", "EnvironmentFile", "NoNewPrivileges", "PrivateTmp",
        "PrivateDevices", "ProtectSystem", "ProtectHome", "ReadWritePaths", "ProtectKernelTunables",
        "ProtectKernelModules", "ProtectControlGroups", "RestrictSUIDSGID", "ProtectKernelLogs",
        "ProtectClock", "ProtectHostname", "RestrictNamespaces", "RestrictRealtime", "LockPersonality",
        "SystemCallArchitectures", "CapabilityBoundingSet", "RestrictAddressFamilies", "UMask", "WantedBy",
    }  # fmt: skip
    assert [s for s in mesh if s[1] in same] == [s for s in reader if s[1] in same]
    assert ("Service", "CapabilityBoundingSet", "") in mesh, "no capability: both ports are above 1024"
    after = next(value for section, key, value in mesh if key == "After").split()
    assert "eureka-registry.service" in after


def test_the_mesh_units_default_ports_yield_to_eureka_env():
    settings = unit("eureka-mesh.service")
    keys = [key for _, key, _ in settings]
    # An EnvironmentFile= wins over Environment= whatever their order; listed first, they read as such.
    assert keys.index("Environment") < keys.index("EnvironmentFile")
    (environment,) = [value for _, key, value in settings if key == "Environment"]
    defaults = dict(item.split("=", 1) for item in environment.split())
    config = parse_config(defaults).mesh
    assert (config.xds_port, config.dns_port) == (18000, 8600)
    assert config.dns_bind == "127.0.0.1", "DNS on loopback unless eureka.env says otherwise"


def test_production_docs_name_the_mesh_unit_and_services():
    text = (ROOT / "docs" / "production.md").read_text()
    assert "`eureka-mesh.service`" in text
    assert "--profile mesh" in text
    assert "make stack MESH=1" in text


# ------------------------------------------------------------------------------------- make stack


def stack(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """deploy/stack.sh with a Redis URL it refuses to check or start (rediss://): it runs its checks
    and stops there, before any process is started."""
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "EUREKA_ENV_FILE": str(tmp_path / "no.env"),
        "EUREKA_DATA_DIR": str(tmp_path),
        "SECRET_KEY": "k" * 50,
        "EUREKA_CONTROL_SECRET": "c" * 32,
        "REDIS_URL": "rediss://127.0.0.1:6379/0",
        **env,
    }
    return subprocess.run(
        ["bash", str(DEPLOY / "stack.sh")], env=environ, capture_output=True, text=True, timeout=60
    )


def test_stack_mesh_ports_default_from_port_and_are_printed(tmp_path):
    done = stack(tmp_path, STACK_MESH="1")
    assert (
        "mesh: xDS on port 18761, DNS on port 8600 (0: off), following http://127.0.0.1:8761" in done.stdout
    )
    assert "only redis:// URLs" in done.stdout + done.stderr, "stopped where the test meant it to"
    assert "started" not in done.stdout
    second = stack(tmp_path, STACK_MESH="1", PORT="8762", EUREKA_CONTROL_URL="")
    assert (
        "mesh: xDS on port 18762, DNS on port 8601 (0: off), following http://127.0.0.1:8762" in second.stdout
    )
    chosen = stack(tmp_path, STACK_MESH="1", EUREKA_XDS_PORT="0", EUREKA_DNS_PORT="5300")
    assert "mesh: xDS on port 0, DNS on port 5300" in chosen.stdout
    assert "mesh:" not in stack(tmp_path).stdout, "STACK_MESH defaults to 0"


@pytest.mark.parametrize(
    ("env", "refusal"),
    [
        ({"STACK_MESH": "yes"}, "STACK_MESH (make stack MESH=1) must be 0 or 1, got 'yes'"),
        ({"STACK_MESH": "1", "PORT": "60000"}, "EUREKA_XDS_PORT must be a port (or 0: off), got '70000'"),
        ({"STACK_MESH": "1", "EUREKA_DNS_PORT": "x"}, "EUREKA_DNS_PORT must be a port (or 0: off), got 'x'"),
        ({"STACK_MESH": "1", "EUREKA_XDS_PORT": "0", "EUREKA_DNS_PORT": "0"}, "nothing to serve"),
        (
            {"STACK_MESH": "1", "EUREKA_DNS_PORT": "8761"},
            "EUREKA_DNS_PORT=8761 is the registry's or the reader's",
        ),
        (
            {"STACK_MESH": "1", "STACK_READERS": "2", "EUREKA_XDS_PORT": "8780"},
            "EUREKA_XDS_PORT=8780 is the registry's or the reader's",
        ),
        ({"STACK_MESH": "1", "EUREKA_DNS_PORT": "18761"}, "EUREKA_XDS_PORT and EUREKA_DNS_PORT must differ"),
    ],
)
def test_stack_refuses_mesh_ports_that_cannot_work_before_starting_anything(tmp_path, env, refusal):
    done = stack(tmp_path, **env)
    assert done.returncode != 0
    assert refusal in done.stderr
    assert "started" not in done.stdout and "only redis:// URLs" not in done.stderr


def test_make_stack_mesh_passes_stack_mesh():
    def command(*args: str) -> str:
        done = subprocess.run(
            ["make", "-n", "stack", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        return next(line for line in done.stdout.splitlines() if "deploy/stack.sh" in line)

    assert "STACK_MESH=1" in command("MESH=1")
    assert "STACK_MESH=0" in command()
