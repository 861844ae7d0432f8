"""The Helm chart (deploy/helm/eureka) and its plain rendering (deploy/kubernetes/eureka.yaml), offline.

helm v4 and the ServiceMonitor CRD are built from the Go module proxy into var/tools/ once
(deploy/helm/tools.py); without Go these tests skip, and fail under EUREKA_REQUIRE_ALL_SUITES=1 (CI).
Rendered manifests are validated against the Kubernetes API's JSON schemas bundled by PyPI's
kubernetes-validate, strictly (an unknown field fails), at the oldest release the chart supports
(native sidecars: 1.29) and the newest the package has; the ServiceMonitor against the CRD schema
controller-gen generates from prometheus-operator's Go API types, the cert-manager Certificate against
the CRD cert-manager publishes in its Go module. Then what the manifests mean: probes, the headless
Service, peers through DNS, the stop's timing, the security context, and HTTPS (TLS off and on).
"""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.interop.conftest import require_toolchain

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("helm_tools", ROOT / "deploy" / "helm" / "tools.py")
tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tools)

KUBERNETES_VERSIONS = ["1.29.0", "1.37.0"]
PROMETHEUS_OPERATOR = ["--set", "metrics.serviceMonitor.enabled=true"]

# Every optional part on at least once, so that each template is rendered and validated.
VARIANTS: dict[str, list[str]] = {
    "defaults": [],
    "readers, ServiceMonitor": ["--set", "readers.enabled=true", *PROMETHEUS_OPERATOR],
    "emptyDir, no Redis data kept": [
        "--set", "persistence.enabled=false", "--set", "redis.keepDataAcrossRestarts=false",
    ],
    "external Redis and PostgreSQL": [
        "--set", "redis.external.enabled=true",
        "--set", "redis.external.url=redis://:pw@redis.infra:6379",
        "--set", "redis.external.databaseOffset=2",
        "--set", "database.url=postgres://eureka:pw@db.infra:5432/eureka",
    ],
    "API accounts, narrowed hosts, existing secret": [
        "--set", "apiAuth.enabled=true",
        "--set", "apiAuth.accounts[0].name=orders", "--set", "apiAuth.accounts[0].role=client",
        "--set", "apiAuth.accountsSecret=eureka-accounts",
        "--set", "secrets.existingSecret=eureka-keys",
        "--set", "allowedHosts[0]=eureka.example.com",
        "--set", "peers.staticUrls[0]=http://outside:8761/eureka/",
        "--set", "peers.nameservers[0]=10.96.0.10",
    ],
    "embedded mode": ["--set", "productionMode=false", "--set", "metrics.tokenEnabled=false"],
    "TLS from a Secret, readers": [
        "--set", "tls.enabled=true", "--set", "tls.secretName=eureka-certs",
        "--set", "readers.enabled=true", *PROMETHEUS_OPERATOR,
    ],
    "TLS by cert-manager, client certificates required, API accounts": [
        "--set", "tls.enabled=true", "--set", "tls.certManager.enabled=true",
        "--set", "tls.certManager.issuerRef.name=eureka-ca",
        "--set", "tls.certManager.issuerRef.kind=ClusterIssuer",
        "--set", "tls.certManager.duration=720h", "--set", "tls.certManager.renewBefore=240h",
        "--set", "tls.clientAuth=required", "--set", "tls.clientCaSecret=client-ca",
        "--set", "apiAuth.enabled=true", *PROMETHEUS_OPERATOR,
        "--set", "metrics.serviceMonitor.clientCertSecret=prometheus-client",
    ],
    "mesh: xDS and DNS, embedded mode": [
        "--set", "productionMode=false", "--set", "mesh.xds.enabled=true", "--set", "mesh.dns.enabled=true",
    ],
    "TLS, client certificates, API accounts, mesh: xDS and DNS": [
        "--set", "tls.enabled=true", "--set", "tls.secretName=eureka-certs",
        "--set", "tls.clientAuth=required", "--set", "tls.clientCaSecret=client-ca",
        "--set", "apiAuth.enabled=true", "--set", "readers.enabled=true",
        "--set", "mesh.xds.enabled=true", "--set", "mesh.xds.port=15010",
        "--set", "mesh.dns.enabled=true", "--set", "mesh.dns.port=5353",
        "--set", "mesh.dns.domain=mesh.example", "--set", "mesh.dns.allowedNetworks=10.0.0.0/8\\,fd00::/8",
    ],
}  # fmt: skip
TLS_SECRET = "TLS from a Secret, readers"
TLS_CERT_MANAGER = "TLS by cert-manager, client certificates required, API accounts"


@pytest.fixture(scope="session")
def helm() -> Path:
    try:
        return tools.helm()
    except tools.ToolUnavailable as exc:
        require_toolchain("helm (built with go)", False, str(exc))
    except tools.ToolFailed as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def servicemonitor_schema(helm) -> dict:
    try:
        crd = yaml.safe_load(tools.servicemonitor_crd_path().read_text())
    except tools.ToolUnavailable as exc:
        require_toolchain("controller-gen (built with go)", False, str(exc))
    except tools.ToolFailed as exc:
        pytest.fail(str(exc), pytrace=False)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return _closed(copy.deepcopy(version["schema"]["openAPIV3Schema"]))


@pytest.fixture(scope="session")
def certificate_schema(helm) -> dict:
    try:
        crd = yaml.safe_load(tools.certificate_crd_path().read_text())
    except tools.ToolUnavailable as exc:
        require_toolchain("cert-manager's CRDs (go mod download)", False, str(exc))
    except tools.ToolFailed as exc:
        pytest.fail(str(exc), pytrace=False)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return _closed(copy.deepcopy(version["schema"]["openAPIV3Schema"]))


def _closed(schema: dict) -> dict:
    """An OpenAPI structural schema that refuses unknown fields, as `kubectl apply` (strict field
    validation) and the API server do: additionalProperties false wherever properties are listed."""
    if isinstance(schema, dict):
        for value in schema.values():
            if isinstance(value, dict | list):
                _closed(value)
        listed = "properties" in schema and "additionalProperties" not in schema
        if listed and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        for item in schema:
            _closed(item)
    return schema


def render(*args: str) -> list[dict]:
    try:
        text = tools.render(*args)
    except tools.ToolFailed as exc:
        pytest.fail(str(exc), pytrace=False)
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="session")
def rendered(helm) -> dict[str, list[dict]]:
    return {name: render(*args) for name, args in VARIANTS.items()}


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} found"
    return found[0]


def statefulset(docs: list[dict]) -> dict:
    return one(docs, "StatefulSet")


def all_containers(pod: dict) -> list[dict]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def env_of(container: dict) -> dict[str, dict]:
    return {entry["name"]: entry for entry in container.get("env", [])}


# ------------------------------------------------------------------------------------- lint, schemas


def test_helm_lint_strict_is_clean_for_every_variant(helm):
    for name, args in VARIANTS.items():
        done = tools._run([str(helm), "lint", "--strict", str(tools.CHART), *args])
        assert "0 chart(s) failed" in done.stdout, f"{name}: {done.stdout}"
        assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, f"{name}: {done.stdout}"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_rendered_manifests_match_the_kubernetes_api_schemas(
    rendered, servicemonitor_schema, certificate_schema, version
):
    kinds = set()
    for name, docs in rendered.items():
        for doc in docs:
            kinds.add(doc["kind"])
            where = f"{name}: {doc['kind']} {doc['metadata']['name']}"
            if doc["apiVersion"] == "monitoring.coreos.com/v1":
                try:
                    jsonschema.validate(doc, servicemonitor_schema)
                except jsonschema.ValidationError as exc:
                    pytest.fail(
                        f"{where} (prometheus-operator {tools.PROMETHEUS_OPERATOR_VERSION}): {exc.message}"
                    )
                continue
            if doc["apiVersion"] == "cert-manager.io/v1":
                try:
                    jsonschema.validate(doc, certificate_schema)
                except jsonschema.ValidationError as exc:
                    pytest.fail(f"{where} (cert-manager {tools.CERT_MANAGER_VERSION}): {exc.message}")
                continue
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{where} (Kubernetes {version}): {exc.message} at {list(exc.path)}")
    assert kinds == {
        "StatefulSet", "Service", "Secret", "PodDisruptionBudget", "ServiceAccount", "ServiceMonitor",
        "Certificate",
    }  # fmt: skip


def test_the_servicemonitor_schema_refuses_unknown_fields(servicemonitor_schema, rendered):
    monitor = one(rendered["readers, ServiceMonitor"], "ServiceMonitor")
    broken = copy.deepcopy(monitor)
    broken["spec"]["endpoints"][0]["bearerTokenSecrett"] = {"name": "x", "key": "y"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, servicemonitor_schema)


def test_a_misspelt_field_fails_the_kubernetes_schema(rendered):
    broken = copy.deepcopy(statefulset(rendered["defaults"]))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_the_plain_manifest_is_the_chart_rendered(helm):
    assert tools.MANIFEST.exists(), "deploy/kubernetes/eureka.yaml is missing: run `make kubernetes`"
    assert tools.MANIFEST.read_text() == tools.manifest(), (
        "deploy/kubernetes/eureka.yaml is not what the chart renders: run `make kubernetes`"
    )
    docs = [d for d in yaml.safe_load_all(tools.MANIFEST.read_text()) if d]
    assert not [d for d in docs if d["kind"] == "Secret"], "the committed manifest must hold no keys"


def test_values_are_checked_by_the_schema(helm):
    with pytest.raises(tools.ToolFailed, match="replicaCount"):
        tools.render("--set", "replicaCount=0")
    with pytest.raises(tools.ToolFailed, match="podManagementPolicy"):
        tools.render("--set", "podManagementPolicy=Sometimes")
    with pytest.raises(tools.ToolFailed, match="each node needs a Redis database"):
        tools.render("--set", "redis.external.enabled=true", "--set", "redis.external.url=redis://r:6379",
                     "--set", "replicaCount=17")  # fmt: skip


def test_every_value_is_commented_and_listed_in_the_chart_readme():
    values = yaml.safe_load((tools.CHART / "values.yaml").read_text())
    readme = (tools.CHART / "README.md").read_text()
    lines = (tools.CHART / "values.yaml").read_text().splitlines()

    def leaves(node, prefix=""):
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and value and not path.endswith(("resources", "SecurityContext")):
                yield from leaves(value, path + ".")
            else:
                yield path

    for path in leaves(values):
        if ".resources." in path or "ecurityContext." in path:
            continue
        assert f"`{path}`" in readme, f"{path} is not in deploy/helm/eureka/README.md"
    # A key with a value (not a parent of other keys) has a comment right above it, unless it is inside
    # resources or a securityContext (Kubernetes' own fields, described once for the block).
    stack: list[tuple[int, str]] = []
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z]\w*):(.*)$", line)
        if not match:
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3).strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        inside = [name for _, name in stack]
        stack.append((indent, key))
        if not rest or any(
            n in ("resources", "podSecurityContext", "containerSecurityContext") for n in inside
        ):
            continue
        assert lines[number - 1].strip().startswith("#"), (
            f"values.yaml line {number + 1} ({line.strip()}) has no comment"
        )


# ------------------------------------------------------------------------------------- what it means


def test_the_statefulset_probes_are_readyz_and_healthz(rendered):
    pod = statefulset(rendered["defaults"])["spec"]["template"]["spec"]
    (registry,) = [c for c in pod["containers"] if c["name"] == "registry"]
    assert registry["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert registry["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert registry["startupProbe"]["httpGet"]["path"] == "/healthz"
    startup = registry["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60, "a first start with migrations"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert registry[probe]["httpGet"]["port"] == "http"
    assert {"name": "http", "containerPort": 8761, "protocol": "TCP"} in registry["ports"]


def _graceful_timeout() -> int:
    text = (ROOT / "deploy" / "gunicorn.conf.py").read_text()
    return int(re.search(r"^graceful_timeout = (\d+)$", text, re.M).group(1))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_grace_period_covers_prestop_graceful_stop_and_the_last_snapshot(rendered, variant):
    pod = statefulset(rendered[variant])["spec"]["template"]["spec"]
    snapshot_margin = 10
    for container in pod["containers"]:
        pre_stop = container.get("lifecycle", {}).get("preStop")
        sleep = int(pre_stop["exec"]["command"][1]) if pre_stop else 0
        assert pod["terminationGracePeriodSeconds"] >= sleep + _graceful_timeout() + snapshot_margin, (
            container["name"]
        )
    (registry,) = [c for c in pod["containers"] if c["name"] == "registry"]
    assert registry["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    assert int(registry["lifecycle"]["preStop"]["exec"]["command"][1]) >= 3, "time to leave the endpoints"


def test_the_headless_service_publishes_not_ready_addresses_and_peers_use_it(rendered):
    docs = rendered["defaults"]
    headless = one(docs, "Service", "eureka-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    client = one(docs, "Service", "eureka")
    assert client["spec"].get("publishNotReadyAddresses") in (None, False)
    sts = statefulset(docs)
    assert sts["spec"]["serviceName"] == "eureka-headless"
    selector = sts["spec"]["selector"]["matchLabels"]
    assert headless["spec"]["selector"] == selector == client["spec"]["selector"]
    for container in sts["spec"]["template"]["spec"]["containers"]:
        env = env_of(container)
        assert env["EUREKA_PEER_DNS"]["value"] == "eureka-headless.eureka.svc.cluster.local:8761"
        assert env["EUREKA_PEER_DNS_INTERVAL_SECONDS"]["value"] == "10"


def test_with_api_accounts_peers_replicate_with_a_peer_account(rendered):
    pod = statefulset(rendered["API accounts, narrowed hosts, existing secret"])["spec"]["template"]["spec"]
    (registry,) = [c for c in pod["containers"] if c["name"] == "registry"]
    env = env_of(registry)
    names = [e["name"] for e in registry["env"]]
    assert env["EUREKA_PEER_DNS"]["value"] == (
        "http://eureka-peer:$(EUREKA_PEER_PASSWORD)@eureka-headless.eureka.svc.cluster.local:8761/eureka/"
    )
    assert names.index("EUREKA_PEER_PASSWORD") < names.index("EUREKA_PEER_DNS"), (
        "$(VAR) expands earlier vars only"
    )
    assert env["EUREKA_PEER_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "eureka-keys"
    script = registry["command"][2]
    assert "eureka_account eureka-peer --role peer --password-file" in script.replace('"', "")
    assert (
        "eureka_account orders --role client --password-file /etc/eureka/accounts/orders"
        in script.replace('"', "")
    )
    assert script.index("eureka_account") < script.index("exec gunicorn")
    hosts = env["ALLOWED_HOSTS"]["value"].split(",")
    assert {"eureka.example.com", "$(POD_IP)", "127.0.0.1", "eureka.eureka.svc"} <= set(hosts)
    assert names.index("POD_IP") < names.index("ALLOWED_HOSTS")
    assert env["EUREKA_PEER_URLS"]["value"] == "http://outside:8761/eureka/"
    assert env["EUREKA_DNS_NAMESERVERS"]["value"] == "10.96.0.10"


def test_no_container_runs_as_root_or_writes_its_root_filesystem(rendered):
    for name, docs in rendered.items():
        pod = statefulset(docs)["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        assert pod["enableServiceLinks"] is False, "EUREKA_PORT and the like would reach the node's settings"
        for container in all_containers(pod):
            context = container["securityContext"]
            where = f"{name}: {container['name']}"
            assert context["runAsNonRoot"] is True and context["runAsUser"] != 0, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert {"/tmp", "/data"} <= mounts, where


def test_the_uid_is_the_dockerfile_user():
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    values = yaml.safe_load((tools.CHART / "values.yaml").read_text())
    uid = values["podSecurityContext"]["runAsUser"]
    assert re.search(rf"useradd .*--uid {uid}\b", dockerfile)
    assert re.search(rf"^USER {uid}(:{uid})?$", dockerfile, re.M)
    assert values["containerSecurityContext"]["runAsUser"] == uid


def test_each_node_pairs_with_its_own_redis_worker_and_beat(rendered):
    pod = statefulset(rendered["defaults"])["spec"]["template"]["spec"]
    names = [c["name"] for c in pod["containers"]]
    assert names == ["registry", "celery-worker", "celery-beat"]
    (redis,) = pod["initContainers"]
    assert redis["name"] == "redis" and redis["restartPolicy"] == "Always", "a native sidecar, stopped last"
    script = redis["command"][2]
    assert (
        "--bind 127.0.0.1" in script
        and "--shutdown-on-sigterm save" in script
        and "--dir /data/redis" in script
    )
    for container in pod["containers"]:
        env = env_of(container)
        assert env["REDIS_URL"]["value"] == "redis://127.0.0.1:6379/0", container["name"]
        assert env["EUREKA_CONTROL_URL"]["value"] == "http://127.0.0.1:8761", container["name"]
        assert env["EUREKA_DATA_DIR"]["value"] == "/data"
        assert env["SECRET_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "SECRET_KEY"
        assert env["EUREKA_CONTROL_SECRET"]["valueFrom"]["secretKeyRef"]["key"] == "EUREKA_CONTROL_SECRET"
    commands = {c["name"]: c["command"][2] for c in pod["containers"]}
    assert "celery -A eureka_site beat" in commands["celery-beat"]
    assert "--schedule=/tmp/celerybeat-schedule" in commands["celery-beat"]
    assert "celery -A eureka_site worker" in commands["celery-worker"]
    assert (
        "migrate --noinput" in commands["registry"]
        and "gunicorn -c deploy/gunicorn.conf.py" in commands["registry"]
    )
    assert not [d for d in rendered["defaults"] if d["kind"] == "Deployment"], "no worker shared by the nodes"


def test_an_external_redis_gives_each_node_a_database_of_its_own(rendered):
    pod = statefulset(rendered["external Redis and PostgreSQL"])["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    for container in pod["containers"]:
        env = env_of(container)
        assert "REDIS_URL" not in env
        assert env["EUREKA_REDIS_BASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "REDIS_URL"
        assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "DATABASE_URL"
        script = container["command"][2]
        assert 'ordinal="${POD_NAME##*-}"' in script, container["name"]
        assert 'export REDIS_URL="${EUREKA_REDIS_BASE_URL%/}/$(( ordinal + 2 ))"' in script, container["name"]


def test_the_prelude_computes_the_database_of_each_ordinal(rendered):
    import subprocess

    pod = statefulset(rendered["external Redis and PostgreSQL"])["spec"]["template"]["spec"]
    script = pod["containers"][1]["command"][2].replace("exec celery", 'echo "$REDIS_URL" #')
    for pod_name, expected in (("eureka-0", "redis://:pw@h:6379/2"), ("eureka-11", "redis://:pw@h:6379/13")):
        env = {"POD_NAME": pod_name, "EUREKA_REDIS_BASE_URL": "redis://:pw@h:6379/", "PATH": "/bin:/usr/bin"}
        done = subprocess.run(
            ["sh", "-c", script],
            env=env,
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert done.stdout.strip() == expected


def test_persistence_is_a_claim_per_node_or_an_empty_dir(rendered):
    sts = statefulset(rendered["defaults"])
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "data" not in {v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]}
    sts = statefulset(rendered["emptyDir, no Redis data kept"])
    assert "volumeClaimTemplates" not in sts["spec"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["data"]
    assert (
        "--shutdown-on-sigterm nosave" in sts["spec"]["template"]["spec"]["initContainers"][0]["command"][2]
    )


def test_readers_run_beside_each_node_and_the_client_service_offers_them(rendered):
    docs = rendered["readers, ServiceMonitor"]
    pod = statefulset(docs)["spec"]["template"]["spec"]
    (reader,) = [c for c in pod["containers"] if c["name"] == "reader"]
    env = env_of(reader)
    assert env["EUREKA_READER_NODE_URL"]["value"] == "http://127.0.0.1:8761"
    assert env["WEB_CONCURRENCY"]["value"] == "2"
    assert reader["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "reader"}
    client = one(docs, "Service", "eureka")
    assert {p["name"]: p["port"] for p in client["spec"]["ports"]} == {"http": 8761, "reader": 8780}


def test_the_servicemonitor_scrapes_the_headless_service_with_the_token(rendered):
    docs = rendered["readers, ServiceMonitor"]
    monitor = one(docs, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    matching = [
        d for d in docs if d["kind"] == "Service" and selector.items() <= d["metadata"]["labels"].items()
    ]
    assert [d["metadata"]["name"] for d in matching] == ["eureka-headless"], "one scrape per node"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] == "http"
    assert endpoint["authorization"]["credentials"] == {"name": "eureka", "key": "EUREKA_METRICS_TOKEN"}
    registry = statefulset(docs)["spec"]["template"]["spec"]["containers"][0]
    assert (
        env_of(registry)["EUREKA_METRICS_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "EUREKA_METRICS_TOKEN"
    )


def test_the_generated_secret_holds_what_the_pods_read(rendered):
    secret = one(rendered["defaults"], "Secret", "eureka")
    assert set(secret["data"]) == {"SECRET_KEY", "EUREKA_CONTROL_SECRET", "EUREKA_METRICS_TOKEN"}
    pod = statefulset(rendered["defaults"])["spec"]["template"]["spec"]
    for container in pod["containers"]:
        for entry in container["env"]:
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] == "eureka" and ref["key"] in secret["data"], entry["name"]


def test_the_pdb_and_the_rolling_update(rendered):
    docs = rendered["defaults"]
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    sts = statefulset(docs)
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    assert sts["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert sts["spec"]["replicas"] == 3


def test_embedded_mode_is_one_container(rendered):
    pod = statefulset(rendered["embedded mode"])["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["registry"]
    assert "initContainers" not in pod
    assert "REDIS_URL" not in env_of(pod["containers"][0])


# ------------------------------------------------------------------------------------- HTTPS (tls.*)

TLS_DIR = "/etc/eureka/tls"
TLS_ENV = (
    "EUREKA_TLS_CERT_FILE", "EUREKA_TLS_KEY_FILE", "EUREKA_TLS_CLIENT_AUTH", "EUREKA_TLS_CLIENT_CA_FILE",
    "EUREKA_OUTBOUND_CA_FILE", "EUREKA_OUTBOUND_CERT_FILE", "EUREKA_OUTBOUND_KEY_FILE",
)  # fmt: skip


def registry_container(docs: list[dict]) -> dict:
    (registry,) = [
        c for c in statefulset(docs)["spec"]["template"]["spec"]["containers"] if c["name"] == "registry"
    ]
    return registry


def notes(*args: str) -> str:
    """NOTES.txt as `helm install` prints it (``helm template`` leaves it out)."""
    done = tools._run([
        str(tools.helm()), "install", "eureka", str(tools.CHART), "--namespace", "eureka",
        "--dry-run=client", *args,
    ])  # fmt: skip
    return done.stdout.partition("NOTES:")[2]


@pytest.mark.parametrize("variant", [v for v in VARIANTS if not v.startswith("TLS")])
def test_without_tls_nothing_changes(rendered, variant):
    docs = rendered[variant]
    assert not [d for d in docs if d["kind"] == "Certificate"]
    pod = statefulset(docs)["spec"]["template"]["spec"]
    assert "tls" not in {v["name"] for v in pod.get("volumes", [])}
    for container in pod["containers"]:
        env = env_of(container)
        assert not set(TLS_ENV) & set(env), container["name"]
        assert env["EUREKA_CONTROL_URL"]["value"] == "http://127.0.0.1:8761"
        assert env["EUREKA_HTTPS"]["value"] == "false"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe in container:
                assert "scheme" not in container[probe].get("httpGet", {}), (container["name"], probe)
    for monitor in (d for d in docs if d["kind"] == "ServiceMonitor"):
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["scheme"] == "http" and "tlsConfig" not in endpoint


def test_tls_from_a_secret_mounts_it_read_only_and_names_its_files(rendered):
    docs = rendered[TLS_SECRET]
    assert not [d for d in docs if d["kind"] == "Certificate"], "the Secret is the user's own"
    pod = statefulset(docs)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "eureka-certs"
    assert "items" not in volumes["tls"]["secret"], "whole directory: a subPath mount is never updated"
    assert volumes["tls"]["secret"]["defaultMode"] == 0o440
    for container in pod["containers"]:
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "tls"]
        assert mount == {"name": "tls", "mountPath": TLS_DIR, "readOnly": True}, container["name"]
        assert "subPath" not in mount
        env = {name: entry.get("value") for name, entry in env_of(container).items()}
        assert env["EUREKA_TLS_CERT_FILE"] == f"{TLS_DIR}/tls.crt"
        assert env["EUREKA_TLS_KEY_FILE"] == f"{TLS_DIR}/tls.key"
        assert env["EUREKA_TLS_CLIENT_AUTH"] == "none"
        assert "EUREKA_TLS_CLIENT_CA_FILE" not in env
        # The node's own certificate is what it presents to its peers; their CA verifies them.
        assert env["EUREKA_OUTBOUND_CERT_FILE"] == env["EUREKA_TLS_CERT_FILE"]
        assert env["EUREKA_OUTBOUND_KEY_FILE"] == env["EUREKA_TLS_KEY_FILE"]
        assert env["EUREKA_OUTBOUND_CA_FILE"] == f"{TLS_DIR}/ca.crt"
        assert env["EUREKA_CONTROL_URL"] == "https://127.0.0.1:8761"
        assert env["EUREKA_HTTPS"] == "true", "Secure cookies, HSTS"
    (reader,) = [c for c in pod["containers"] if c["name"] == "reader"]
    assert env_of(reader)["EUREKA_READER_NODE_URL"]["value"] == "https://127.0.0.1:8761"
    no_ca = statefulset(
        render("--set", "tls.enabled=true", "--set", "tls.secretName=public", "--set", "tls.caKey=")
    )
    (registry,) = no_ca["spec"]["template"]["spec"]["containers"][:1]
    assert "EUREKA_OUTBOUND_CA_FILE" not in env_of(registry), "empty caKey: the system's trust store"


@pytest.mark.parametrize("variant", [TLS_SECRET, TLS_CERT_MANAGER])
def test_with_tls_peers_are_found_by_srv_and_called_over_https(rendered, variant):
    env = env_of(registry_container(rendered[variant]))
    peers = env["EUREKA_PEER_DNS"]["value"]
    assert peers.startswith("https://") and peers.endswith(
        "@_http._tcp.eureka-headless.eureka.svc.cluster.local/eureka/"
        if "@" in peers
        else "https://_http._tcp.eureka-headless.eureka.svc.cluster.local/eureka/"
    )
    from registry.domain.endpoints import parse_peer_dns

    (entry,) = parse_peer_dns([peers])
    assert entry.srv and entry.scheme == "https"
    # SRV targets are the pods' names under the headless Service, which the certificate names.
    assert entry.peer_at("eureka-1.eureka-headless.eureka.svc.cluster.local", 8761).display_url == (
        "https://eureka-1.eureka-headless.eureka.svc.cluster.local:8761/eureka/"
    )
    headless = one(rendered[variant], "Service", "eureka-headless")
    assert [p["name"] for p in headless["spec"]["ports"]] == ["http"], "the SRV name is _http._tcp"


def test_with_tls_the_probes_use_https(rendered):
    pod = statefulset(rendered[TLS_SECRET])["spec"]["template"]["spec"]
    (reader,) = [c for c in pod["containers"] if c["name"] == "reader"]
    assert reader["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "reader", "scheme": "HTTPS"}, (
        "a reader serves HTTPS with the same settings"
    )
    registry = registry_container(rendered[TLS_SECRET])
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/healthz"),
    ):
        assert registry[probe]["httpGet"] == {"path": path, "port": "http", "scheme": "HTTPS"}, probe


def test_the_certificate_names_the_services_the_peers_and_loopback(rendered):
    docs = rendered[TLS_CERT_MANAGER]
    certificate = one(docs, "Certificate")
    spec = certificate["spec"]
    assert spec["secretName"] == "eureka-tls"
    assert statefulset(docs)["spec"]["template"]["spec"]["volumes"][1]["secret"]["secretName"] == "eureka-tls"
    assert set(spec["dnsNames"]) == {
        "eureka", "eureka.eureka", "eureka.eureka.svc", "eureka.eureka.svc.cluster.local",
        "eureka-headless.eureka.svc.cluster.local", "*.eureka-headless.eureka.svc.cluster.local", "localhost",
    }  # fmt: skip
    assert spec["ipAddresses"] == ["127.0.0.1"]
    assert {"server auth", "client auth"} <= set(spec["usages"]), "served, and presented to peers"
    assert spec["issuerRef"] == {"name": "eureka-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert spec["duration"] == "720h" and spec["renewBefore"] == "240h"
    assert spec["privateKey"]["rotationPolicy"] == "Always"


def test_required_client_certificates_need_the_client_ca_and_probes_that_present_one(rendered):
    docs = rendered[TLS_CERT_MANAGER]
    pod = statefulset(docs)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["client-ca"]["secret"] == {
        "secretName": "client-ca",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    registry = registry_container(docs)
    env = env_of(registry)
    assert env["EUREKA_TLS_CLIENT_AUTH"]["value"] == "required"
    assert env["EUREKA_TLS_CLIENT_CA_FILE"]["value"] == "/etc/eureka/client-ca/ca.crt"
    assert {"name": "client-ca", "mountPath": "/etc/eureka/client-ca", "readOnly": True} in registry[
        "volumeMounts"
    ]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert "httpGet" not in registry[probe], "the kubelet presents no client certificate"
        command = registry[probe]["exec"]["command"]
        assert command[:3] == ["python", "-I", "-c"] and f"{TLS_DIR}/tls.crt" in command[3]
    # Without a client CA Secret, the client CA is the nodes' own CA.
    same_ca = statefulset(render(
        "--set", "tls.enabled=true", "--set", "tls.secretName=s", "--set", "tls.clientAuth=optional",
    ))  # fmt: skip
    (registry,) = same_ca["spec"]["template"]["spec"]["containers"][:1]
    assert env_of(registry)["EUREKA_TLS_CLIENT_CA_FILE"]["value"] == f"{TLS_DIR}/ca.crt"
    assert registry["readinessProbe"]["httpGet"]["scheme"] == "HTTPS", "optional: the kubelet gets in"


def test_the_exec_probe_gets_through_a_port_that_requires_a_client_certificate(rendered, tmp_path):
    import http.server
    import ssl
    import subprocess
    import sys
    import threading

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1")
    node_cert = ca.issue_cert("eureka-0.eureka-headless.eureka.svc.cluster.local")
    node_cert.private_key_and_cert_chain_pem.write_to_path(tmp_path / "tls.crt")
    node_cert.private_key_pem.write_to_path(tmp_path / "tls.key")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path in ("/healthz", "/readyz") else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_cert.configure_cert(context)
    ca.configure_trust(context)
    context.verify_mode = ssl.CERT_REQUIRED
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        registry = registry_container(rendered[TLS_CERT_MANAGER])
        for probe in ("startupProbe", "readinessProbe"):
            script = registry[probe]["exec"]["command"][3]
            script = script.replace(TLS_DIR, str(tmp_path)).replace("8761", str(server.server_address[1]))
            done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, timeout=30)
            assert done.returncode == 0, done.stderr.decode()
            without_cert = script.replace("context.load_cert_chain", "print")
            done = subprocess.run([sys.executable, "-I", "-c", without_cert], capture_output=True, timeout=30)
            assert done.returncode != 0, "the test server must refuse a client without a certificate"
    finally:
        server.shutdown()
        server.server_close()


def test_with_tls_the_servicemonitor_scrapes_https_with_the_ca(rendered):
    (endpoint,) = one(rendered[TLS_SECRET], "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["port"] == "http"
    assert endpoint["tlsConfig"] == {
        "serverName": "eureka-headless.eureka.svc.cluster.local",
        "ca": {"secret": {"name": "eureka-certs", "key": "ca.crt"}},
    }
    (endpoint,) = one(rendered[TLS_CERT_MANAGER], "ServiceMonitor")["spec"]["endpoints"]
    config = endpoint["tlsConfig"]
    assert config["ca"] == {"secret": {"name": "eureka-tls", "key": "ca.crt"}}
    assert config["cert"] == {"secret": {"name": "prometheus-client", "key": "tls.crt"}}
    assert config["keySecret"] == {"name": "prometheus-client", "key": "tls.key"}
    env = env_of(registry_container(rendered[TLS_CERT_MANAGER]))
    assert "EUREKA_TLS_PLAIN_PORT" not in env, "no unencrypted port for the scrapes"


def test_tls_settings_that_cannot_work_are_refused(helm):
    with pytest.raises(tools.ToolFailed, match="tls.enabled needs tls.secretName"):
        tools.render("--set", "tls.enabled=true")
    with pytest.raises(tools.ToolFailed, match="issuerRef.name"):
        tools.render("--set", "tls.enabled=true", "--set", "tls.certManager.enabled=true")
    with pytest.raises(tools.ToolFailed, match="needs a CA bundle"):
        tools.render("--set", "tls.enabled=true", "--set", "tls.secretName=s",
                     "--set", "tls.clientAuth=required", "--set", "tls.caKey=")  # fmt: skip
    with pytest.raises(tools.ToolFailed, match="clientAuth"):
        tools.render(
            "--set", "tls.enabled=true", "--set", "tls.secretName=s", "--set", "tls.clientAuth=maybe"
        )


def test_the_notes_print_https_urls_with_tls_and_http_without(helm):
    with_tls = notes(
        "--set", "tls.enabled=true", "--set", "tls.secretName=s", "--set", "tls.clientAuth=required"
    )
    assert "https://eureka.eureka.svc:8761/eureka/" in with_tls
    assert "http://" not in with_tls
    assert "must present a client certificate" in with_tls
    assert "http://eureka.eureka.svc:8761/eureka/" in notes()
    assert "https://" not in notes()


# ------------------------------------------------------------------------------------- mesh (mesh.*)

MESH_EMBEDDED = "mesh: xDS and DNS, embedded mode"
MESH_TLS = "TLS, client certificates, API accounts, mesh: xDS and DNS"
MESH_ENV = ("EUREKA_MESH_", "EUREKA_XDS_", "EUREKA_DNS_PORT", "EUREKA_DNS_BIND", "EUREKA_DNS_DOMAIN",
            "EUREKA_DNS_ALLOWED")  # fmt: skip


def mesh_container(docs: list[dict]) -> dict:
    (mesh,) = [c for c in statefulset(docs)["spec"]["template"]["spec"]["containers"] if c["name"] == "mesh"]
    return mesh


def client_service_ports(docs: list[dict]) -> dict[str, tuple[int, str, str]]:
    client = one(docs, "Service", "eureka")
    return {p["name"]: (p["port"], p["targetPort"], p["protocol"]) for p in client["spec"]["ports"]}


@pytest.mark.parametrize("variant", [v for v in VARIANTS if "mesh" not in v])
def test_with_the_mesh_off_there_is_no_mesh_container_port_or_setting(rendered, variant):
    docs = rendered[variant]
    pod = statefulset(docs)["spec"]["template"]["spec"]
    assert "mesh" not in [c["name"] for c in pod["containers"]]
    for container in pod["containers"]:
        assert not [name for name in env_of(container) if name.startswith(MESH_ENV)], container["name"]
        assert not {"xds", "dns-udp", "dns-tcp"} & {p["name"] for p in container.get("ports", [])}
    assert not {"xds", "dns-udp", "dns-tcp"} & set(client_service_ports(docs))


def test_the_mesh_values_change_nothing_while_both_are_off(helm):
    def pod_and_services(*args: str) -> list[dict]:
        # The chart's Secret is generated anew at every render: everything else must be the same.
        return [d for d in render(*args) if d["kind"] != "Secret"]

    assert pod_and_services() == pod_and_services(
        "--set", "mesh.xds.port=19000", "--set", "mesh.dns.port=5300", "--set", "mesh.dns.domain=other",
        "--set", "mesh.dns.allowedNetworks=10.0.0.0/8", "--set", "mesh.resources.requests.cpu=2",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("variant", "containers"),
    [
        (MESH_EMBEDDED, ["registry", "mesh"]),
        (MESH_TLS, ["registry", "celery-worker", "celery-beat", "reader", "mesh"]),
    ],
)
def test_the_mesh_container_runs_manage_py_mesh_beside_the_node_in_either_mode(rendered, variant, containers):
    docs = rendered[variant]
    pod = statefulset(docs)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == containers
    mesh = mesh_container(docs)
    registry = registry_container(docs)
    assert mesh["command"][:2] == ["sh", "-c"]
    assert mesh["command"][2].strip().splitlines()[-1] == "exec python manage.py mesh"
    assert mesh["image"] == registry["image"]
    assert mesh["securityContext"] == registry["securityContext"]
    # The node's settings as every container of the pod gets them, then the mesh process's own.
    mesh_env = [e for e in mesh["env"] if not e["name"].startswith(MESH_ENV)]
    assert mesh_env == [e for e in registry["env"] if not e["name"].startswith(MESH_ENV)]
    assert mesh["resources"] == {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
    assert {m["name"]: m["mountPath"] for m in mesh["volumeMounts"]} == {
        m["name"]: m["mountPath"] for m in registry["volumeMounts"] if m["name"] != "accounts"
    }, "the data directory (API accounts in SQLite), /tmp, and with TLS the node's files"


def test_the_mesh_process_follows_its_own_node_and_serves_both_ports(rendered):
    docs = rendered[MESH_EMBEDDED]
    mesh = mesh_container(docs)
    env = {name: entry.get("value") for name, entry in env_of(mesh).items()}
    assert env["EUREKA_MESH_NODE_URL"] == "http://127.0.0.1:8761"
    assert env["EUREKA_XDS_PORT"] == "18000" and env["EUREKA_DNS_PORT"] == "8600"
    assert env["EUREKA_DNS_BIND"] == "0.0.0.0", "the pod's loopback is of no use to other pods"
    assert env["EUREKA_DNS_DOMAIN"] == "eureka"
    assert "EUREKA_DNS_ALLOWED_NETWORKS" not in env, "empty: the setting's own default"
    assert "EUREKA_MESH_NODE_USER" not in env and "EUREKA_MESH_NODE_PASSWORD_FILE" not in env
    assert mesh["ports"] == [
        {"name": "xds", "containerPort": 18000, "protocol": "TCP"},
        {"name": "dns-udp", "containerPort": 8600, "protocol": "UDP"},
        {"name": "dns-tcp", "containerPort": 8600, "protocol": "TCP"},
    ]
    assert client_service_ports(docs) == {
        "http": (8761, "http", "TCP"),
        "xds": (18000, "xds", "TCP"),
        "dns-udp": (8600, "dns-udp", "UDP"),
        "dns-tcp": (8600, "dns-tcp", "TCP"),
    }
    headless = one(docs, "Service", "eureka-headless")
    assert [p["name"] for p in headless["spec"]["ports"]] == ["http"], "peers' SRV name stays _http._tcp"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert mesh[probe]["tcpSocket"] == {"port": "xds"}, probe
    assert mesh["lifecycle"] == registry_container(docs)["lifecycle"], "preStop like the others"


def test_the_rendered_mesh_settings_are_what_the_mesh_process_reads(rendered, tmp_path):
    from registry.config.eureka import parse_config

    mesh = mesh_container(rendered[MESH_TLS])
    password_file = tmp_path / "EUREKA_PEER_PASSWORD"
    password_file.write_text("peer-secret\n")
    environ = {
        name: entry["value"].replace("/etc/eureka/peer/EUREKA_PEER_PASSWORD", str(password_file))
        for name, entry in env_of(mesh).items()
        if name.startswith(MESH_ENV) or name in ("EUREKA_API_AUTH", "EUREKA_CONTROL_URL")
    }
    config = parse_config(environ).mesh
    assert config.node_url == "https://127.0.0.1:8761"
    assert (config.node_user, config.node_password) == ("eureka-peer", "peer-secret")
    assert (config.xds_port, config.dns_port) == (15010, 5353)
    assert config.dns_bind == "0.0.0.0" and config.dns_domain == "mesh.example"
    assert config.dns_allowed_networks == ("10.0.0.0/8", "fd00::/8")


def test_with_api_accounts_and_tls_the_mesh_reads_as_the_peer_account_over_https(rendered):
    docs = rendered[MESH_TLS]
    mesh = mesh_container(docs)
    env = env_of(mesh)
    assert env["EUREKA_MESH_NODE_URL"]["value"] == "https://127.0.0.1:8761"
    assert env["EUREKA_MESH_NODE_USER"]["value"] == "eureka-peer"
    # The password: the same Secret key the registry container makes the peer account with, as a file.
    password_file = env["EUREKA_MESH_NODE_PASSWORD_FILE"]["value"]
    mounts = {m["mountPath"]: m for m in mesh["volumeMounts"]}
    mount = mounts[str(Path(password_file).parent)]
    assert mount["readOnly"] is True
    volumes = {v["name"]: v for v in statefulset(docs)["spec"]["template"]["spec"]["volumes"]}
    items = volumes[mount["name"]]["secret"]["items"]
    assert {"key": "EUREKA_PEER_PASSWORD", "path": Path(password_file).name} in items
    assert f"--password-file {password_file}" in registry_container(docs)["command"][2]
    # TLS: the node's files, for the xDS port's TLS and for the calls to the node.
    assert {"name": "tls", "mountPath": TLS_DIR, "readOnly": True} in mesh["volumeMounts"]
    assert {"name": "client-ca", "mountPath": "/etc/eureka/client-ca", "readOnly": True} in mesh[
        "volumeMounts"
    ]
    for name in TLS_ENV:
        assert env[name] == env_of(registry_container(docs))[name], name
    assert env["EUREKA_DNS_ALLOWED_NETWORKS"]["value"] == "10.0.0.0/8,fd00::/8"
    assert env["EUREKA_DNS_DOMAIN"]["value"] == "mesh.example"
    # A TCP probe needs no handshake: required client certificates do not stop it.
    assert mesh["readinessProbe"]["tcpSocket"] == {"port": "xds"}
    ports = client_service_ports(docs)
    assert ports["xds"] == (15010, "xds", "TCP") and ports["dns-udp"] == (5353, "dns-udp", "UDP")
    assert ports["reader"] == (8780, "reader", "TCP")


def test_only_what_is_on_is_served_probed_and_offered(helm):
    xds_only = render("--set", "mesh.xds.enabled=true")
    mesh = mesh_container(xds_only)
    env = env_of(mesh)
    assert env["EUREKA_XDS_PORT"]["value"] == "18000"
    assert not {"EUREKA_DNS_PORT", "EUREKA_DNS_BIND", "EUREKA_DNS_DOMAIN"} & set(env)
    assert [p["name"] for p in mesh["ports"]] == ["xds"]
    assert set(client_service_ports(xds_only)) == {"http", "xds"}

    dns_only = render("--set", "mesh.dns.enabled=true")
    mesh = mesh_container(dns_only)
    env = env_of(mesh)
    assert "EUREKA_XDS_PORT" not in env and env["EUREKA_DNS_PORT"]["value"] == "8600"
    assert [p["name"] for p in mesh["ports"]] == ["dns-udp", "dns-tcp"]
    assert set(client_service_ports(dns_only)) == {"http", "dns-udp", "dns-tcp"}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert mesh[probe]["tcpSocket"] == {"port": "dns-tcp"}, "DNS's TCP port when xDS is off"


def test_mesh_values_that_cannot_work_are_refused(helm):
    both = ["--set", "mesh.xds.enabled=true", "--set", "mesh.dns.enabled=true"]
    with pytest.raises(tools.ToolFailed, match="mesh.xds.port and mesh.dns.port must differ"):
        tools.render(*both, "--set", "mesh.dns.port=18000")
    with pytest.raises(tools.ToolFailed, match="mesh.xds.port must differ from the node's port"):
        tools.render(*both, "--set", "mesh.xds.port=8761")
    with pytest.raises(tools.ToolFailed, match="mesh.dns.port must differ from readers.port"):
        tools.render(*both, "--set", "readers.enabled=true", "--set", "mesh.dns.port=8780")
    with pytest.raises(tools.ToolFailed, match="mesh.dns.port"):
        tools.render(
            *both, "--set", "mesh.dns.port=53"
        )  # a privileged port: the container has no right to it
    with pytest.raises(tools.ToolFailed, match="mesh.dns.domain"):
        tools.render(*both, "--set", "mesh.dns.domain=not a domain")
    with pytest.raises(tools.ToolFailed, match="mesh.dns.allowedNetworks"):
        tools.render(*both, "--set", "mesh.dns.allowedNetworks=everyone")
    # The same ports are fine while the part that would use them is off.
    tools.render("--set", "mesh.xds.enabled=true", "--set", "mesh.dns.port=18000")


def test_the_notes_tell_the_xds_address_and_the_dns_names_when_on(helm):
    on = notes(
        "--set", "mesh.xds.enabled=true", "--set", "mesh.dns.enabled=true",
        "--set", "mesh.dns.domain=mesh.example",
    )  # fmt: skip
    assert "eureka.eureka.svc:18000" in on
    assert "NAME.service.mesh.example" in on and "_NAME._tcp.service.mesh.example" in on
    assert "forward . CLUSTER_IP:8600" in on
    assert "answers the pod itself only" not in on
    guarded = notes("--set", "mesh.dns.enabled=true", "--set", "apiAuth.enabled=true")
    assert "answers the pod itself only" in guarded and "mesh.dns.allowedNetworks" in guarded
    assert "18000" not in guarded, "xDS is off"
    off = notes()
    assert "xDS" not in off and ".service." not in off
