"""deploy/: the manifests agree with the settings, the app's routes, each other and the docs.

Nothing here needs Docker or a cluster: every file is parsed and cross-checked, settings are
validated by `Settings` itself, and probe paths are asked of the app on fakeredis.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import fakeredis
import pytest
import yaml
from pydantic import SecretStr
from redis import Redis
from starlette.routing import Route
from starlette.testclient import TestClient

from tests.conftest import need
from toolref.wire.errors import ConfigurationError
from toolref_server.app import create_app
from toolref_server.settings import Settings, parse_api_keys

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
OPERATIONS = ROOT / "docs" / "operations.md"
ENV_NAME = re.compile(r"\bTOOLREF_[A-Z0-9_]+")
URL = re.compile(r"http://[^/\s'\"]+?(?::(\d+))?(/[\w./-]*)")
EVICTION_POLICIES = {
    "noeviction",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
}
# A key and its `tenant=<hash>` entry, as `toolref-server keygen` would print them.
KEY = "trk_test-key"
KEYS_ENTRY = f"acme={hashlib.sha256(KEY.encode()).hexdigest()}"

Doc = dict[str, Any]


# --- readers ---------------------------------------------------------------------------------


def field_of(name: str) -> str | None:
    """`TOOLREF_X` -> `x` when that is a Settings field, else None."""
    if not name.startswith("TOOLREF_"):
        return None
    field = name.removeprefix("TOOLREF_").lower()
    return field if field in Settings.model_fields else None


def k8s_documents() -> list[tuple[Path, Doc]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                assert isinstance(doc, dict), f"{path.name}: a document is not a mapping"
                found.append((path, doc))
    return found


def k8s(kind: str) -> Doc:
    docs = [doc for _, doc in k8s_documents() if doc.get("kind") == kind]
    assert len(docs) == 1, f"expected one {kind} in deploy/k8s, found {len(docs)}"
    return docs[0]


def pod_spec() -> Doc:
    spec: Doc = k8s("Deployment")["spec"]["template"]["spec"]
    return spec


def container() -> Doc:
    containers: list[Doc] = pod_spec()["containers"]
    assert len(containers) == 1, "the pod runs the service alone"
    return containers[0]


def container_port(port: int | str) -> int:
    """A port number, or the container port that a port name (`http`) stands for."""
    if isinstance(port, int):
        return port
    named = [p["containerPort"] for p in container()["ports"] if p.get("name") == port]
    assert named, f"no container port is named {port!r}"
    return int(named[0])


def compose() -> Doc:
    doc: Doc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return doc


def interpolate(value: object, env: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}` and `${VAR:?error}`, with `env` as the shell."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        assert op != ":?", f"compose requires {name}: {arg}"
        return arg if op == ":-" else ""

    return re.sub(r"\$\{(\w+)(?:(:[-?])([^}]*))?\}", one, str(value))


def compose_env(env: dict[str, str]) -> dict[str, str]:
    environment: dict[str, object] = compose()["services"]["toolref"]["environment"]
    return {name: interpolate(value, env) for name, value in environment.items()}


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, args = line.strip().partition(" ")
            found.append((instruction.upper(), args.strip()))
    return found


def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile()
    last_from = max(i for i, (name, _) in enumerate(instructions) if name == "FROM")
    return instructions[last_from:]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for name, args in final_stage():
        if name == "ENV":
            for token in shlex.split(args):
                key, sep, value = token.partition("=")
                assert sep, f"ENV {token!r}: use the KEY=value form"
                env[key] = value
    return env


def redis_conf() -> dict[str, str]:
    conf: dict[str, str] = {}
    for line in (DEPLOY / "redis.conf").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            directive, _, value = line.strip().partition(" ")
            conf[directive.lower()] = value.strip()
    return conf


def recommended_policy() -> str:
    """The eviction policy that the Checklist of docs/operations.md names."""
    text = OPERATIONS.read_text()
    checklist = text.partition("## Checklist")[2].split("\n## ")[0]
    named: set[str] = set(re.findall(r"`([a-z-]+)`", checklist)) & EVICTION_POLICIES
    assert len(named) == 1, f"the operations checklist names policies {named}, expected one"
    return named.pop()


def served_paths() -> set[str]:
    app = create_app(Settings(redis_url="unused"), redis=fakeredis.aioredis.FakeRedis())
    return {route.path for route in app.routes if isinstance(route, Route)}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No TOOLREF_* from the developer's shell leaks into the settings under test."""
    for name in list(os.environ):
        if name.startswith("TOOLREF_"):
            monkeypatch.delenv(name)
    return monkeypatch


def settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()


# --- settings --------------------------------------------------------------------------------


def test_every_toolref_variable_in_deploy_is_a_setting() -> None:
    named: dict[str, set[str]] = {}
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file():
            for name in ENV_NAME.findall(path.read_text()):
                named.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert "TOOLREF_API_KEYS" in named
    unknown = {name: where for name, where in named.items() if field_of(name) is None}
    assert not unknown, f"not fields of Settings: {unknown}"

    # Keys read as variables must all be settings: envFrom passes every key of the
    # ConfigMap and Secret, and a misspelt one would be silently ignored.
    structured = {
        "configmap.yaml": set(k8s("ConfigMap")["data"]),
        "secret.yaml": set(k8s("Secret")["stringData"]),
        "compose.yaml": set(compose()["services"]["toolref"]["environment"]),
        "Dockerfile": {name for name in dockerfile_env() if name.startswith("TOOLREF")},
        "deployment.yaml": {env["name"] for env in container().get("env", [])},
    }
    for source, names in structured.items():
        wrong = {name for name in names if field_of(name) is None}
        assert not wrong, f"{source}: {wrong} are not TOOLREF_* settings"


def test_k8s_configmap_and_secret_make_valid_settings(clean_env: pytest.MonkeyPatch) -> None:
    data: dict[str, object] = k8s("ConfigMap")["data"]
    # Kubernetes refuses a ConfigMap whose values are not strings (an unquoted 8750).
    assert all(isinstance(value, str) for value in data.values()), data
    env = {name: str(value) for name, value in data.items()}
    env.update(k8s("Secret")["stringData"])
    settings = settings_from(env, clean_env)
    settings.check_exposure()  # bound beyond loopback, so it needs the keys from the Secret
    settings.check_summarizer()
    assert not settings.is_loopback
    assert settings.redis_url
    # One worker per core (docs/operations.md): no more workers than the CPU limit.
    cpu = str(container()["resources"]["limits"]["cpu"])
    cores = int(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    assert settings.workers <= cores
    # /metrics is per process: one worker per pod, so a scrape of the pod sees all of it.
    assert settings.workers == 1


def test_compose_environment_makes_valid_settings(clean_env: pytest.MonkeyPatch) -> None:
    shell = {"TOOLREF_API_KEYS": KEYS_ENTRY, "REDIS_PASSWORD": "0123abcd"}
    settings = settings_from(compose_env(shell), clean_env)
    settings.check_exposure()
    assert settings.key_hashes == parse_api_keys(KEYS_ENTRY)
    # The URL names the compose redis service, on the port redis.conf sets, with the password.
    assert settings.redis_url is not None
    url = urlsplit(settings.redis_url)
    assert url.hostname in compose()["services"]
    assert url.port == int(redis_conf()["port"])
    assert url.password == shell["REDIS_PASSWORD"]


def test_compose_refuses_to_start_without_keys_or_password() -> None:
    with pytest.raises(AssertionError, match="TOOLREF_API_KEYS"):
        compose_env({"REDIS_PASSWORD": "0123abcd"})
    with pytest.raises(AssertionError, match="REDIS_PASSWORD"):
        compose_env({"TOOLREF_API_KEYS": KEYS_ENTRY})


def test_image_environment_needs_api_keys(clean_env: pytest.MonkeyPatch) -> None:
    env = dockerfile_env()
    assert env["TOOLREF_HOST"] == "0.0.0.0"
    # As the Dockerfile's comment says: the image alone refuses to serve without keys ...
    with pytest.raises(ConfigurationError, match="TOOLREF_API_KEYS"):
        settings_from(env, clean_env).check_exposure()
    # ... and serves once they are given.
    settings_from({**env, "TOOLREF_API_KEYS": KEYS_ENTRY}, clean_env).check_exposure()
    comments = (DEPLOY / "Dockerfile").read_text()
    assert "TOOLREF_API_KEYS" in comments
    assert "TOOLREF_REDIS_URL" in comments


def test_secret_holds_hashes_never_keys() -> None:
    secret = k8s("Secret")
    assert secret["type"] == "Opaque"
    values: dict[str, str] = secret["stringData"]
    assert set(values) >= {"TOOLREF_API_KEYS", "TOOLREF_REDIS_URL"}
    assert parse_api_keys(values["TOOLREF_API_KEYS"]), "at least one tenant=<hash> entry"
    for name, value in values.items():
        assert "trk_" not in value, f"{name} holds a plaintext key (keygen's trk_ prefix)"
    # Whatever is secret lives in the Secret only, never in the ConfigMap.
    secret_fields = {"api_keys", "redis_url"} | {
        name
        for name, info in Settings.model_fields.items()
        if SecretStr in (info.annotation, *getattr(info.annotation, "__args__", ()))
    }
    assert "llm_api_key" in secret_fields
    leaked = {name for name in k8s("ConfigMap")["data"] if field_of(name) in secret_fields}
    assert not leaked, f"secrets in the ConfigMap: {leaked}"


# --- ports and probes ------------------------------------------------------------------------


def test_every_port_agrees() -> None:
    ports: dict[str, int] = {}
    for name, args in final_stage():
        if name == "EXPOSE":
            ports["Dockerfile EXPOSE"] = int(args.split("/")[0])
        if name == "HEALTHCHECK":
            default = re.search(r"'TOOLREF_PORT', '(\d+)'", args)
            assert default, "the HEALTHCHECK falls back to a port when TOOLREF_PORT is unset"
            ports["Dockerfile HEALTHCHECK"] = int(default.group(1))
    ports["Dockerfile TOOLREF_PORT"] = int(dockerfile_env()["TOOLREF_PORT"])

    service = compose()["services"]["toolref"]
    ports["compose TOOLREF_PORT"] = int(service["environment"]["TOOLREF_PORT"])
    for n, mapping in enumerate(service["ports"]):
        target = mapping["target"] if isinstance(mapping, dict) else str(mapping).split(":")[-1]
        ports[f"compose ports[{n}]"] = int(str(target).split("/")[0])
    health = URL.search(" ".join(service["healthcheck"]["test"]))
    assert health, "the compose healthcheck calls an http:// URL"
    assert health.group(1), "with an explicit port"
    ports["compose healthcheck"] = int(health.group(1))

    ports["ConfigMap TOOLREF_PORT"] = int(k8s("ConfigMap")["data"]["TOOLREF_PORT"])
    for n, port in enumerate(container()["ports"]):
        ports[f"containerPort[{n}]"] = int(port["containerPort"])
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if probe in container():
            ports[probe] = container_port(container()[probe]["httpGet"]["port"])
    for n, port in enumerate(k8s("Service")["spec"]["ports"]):
        ports[f"Service targetPort[{n}]"] = container_port(port["targetPort"])
    annotations = k8s("Deployment")["spec"]["template"]["metadata"]["annotations"]
    ports["prometheus.io/port"] = int(annotations["prometheus.io/port"])

    assert len(set(ports.values())) == 1, f"ports disagree: {ports}"


def test_probes_are_routes_the_app_serves(clean_env: pytest.MonkeyPatch) -> None:
    probes: dict[str, str] = {
        name: container()[name]["httpGet"]["path"]
        for name in ("readinessProbe", "livenessProbe", "startupProbe")
        if name in container()
    }
    assert probes["readinessProbe"] == "/readyz"
    # Liveness must not depend on Redis: an outage would restart every pod at once.
    assert probes["livenessProbe"] == "/healthz"
    healthcheck = next(args for name, args in final_stage() if name == "HEALTHCHECK")
    for source, text in (
        ("Dockerfile HEALTHCHECK", healthcheck),
        ("compose healthcheck", " ".join(compose()["services"]["toolref"]["healthcheck"]["test"])),
    ):
        match = URL.search(text)
        assert match, f"{source} calls no http:// URL"
        probes[source] = match.group(2)

    assert set(probes.values()) <= served_paths(), probes
    # And they answer 200 on a healthy app (fakeredis answers /readyz's PING).
    app = create_app(Settings(redis_url="unused"), redis=fakeredis.aioredis.FakeRedis())
    with TestClient(app) as client:
        for source, path in probes.items():
            assert client.get(path).status_code == 200, f"{source}: GET {path}"


def test_metrics_scrape_path_is_served() -> None:
    template = k8s("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert template["prometheus.io/scrape"] == "true"
    path = template["prometheus.io/path"]
    assert path == "/metrics"
    assert path in served_paths()


# --- kubernetes ------------------------------------------------------------------------------


def test_every_k8s_document_follows_api_conventions() -> None:
    documents = k8s_documents()
    files = {path.name for path, _ in documents}
    expected = {"configmap", "secret", "deployment", "service", "hpa", "pdb"}
    assert files == {f"{name}.yaml" for name in expected}
    versions = {
        "ConfigMap": "v1",
        "Secret": "v1",
        "Service": "v1",
        "Deployment": "apps/v1",
        "HorizontalPodAutoscaler": "autoscaling/v2",
        "PodDisruptionBudget": "policy/v1",
    }
    pod_labels: dict[str, str] = k8s("Deployment")["spec"]["template"]["metadata"]["labels"]
    for path, doc in documents:
        assert doc["kind"] in versions, f"{path.name}: unexpected kind {doc.get('kind')}"
        assert doc["apiVersion"] == versions[doc["kind"]], path.name
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
        # One label set across the files, so `kubectl get all -l ...` finds everything.
        assert doc["metadata"]["labels"] == pod_labels, path.name


def test_selectors_pick_the_deployments_pods() -> None:
    deployment = k8s("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selectors = {
        "Deployment": deployment["spec"]["selector"]["matchLabels"],
        "Service": k8s("Service")["spec"]["selector"],
        "PodDisruptionBudget": k8s("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    }
    for kind, selector in selectors.items():
        assert selector, f"{kind} selects nothing"
        assert selector.items() <= pod_labels.items(), f"{kind} selector {selector} misses pods"

    target = k8s("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert target == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }


def test_autoscaling_and_disruption_budget_fit_together() -> None:
    hpa = k8s("HorizontalPodAutoscaler")["spec"]
    assert any(
        metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
        for metric in hpa["metrics"]
    )
    # Utilization is measured against requests: without a CPU request the HPA does nothing.
    assert container()["resources"]["requests"]["cpu"]
    assert 1 <= hpa["minReplicas"] <= hpa["maxReplicas"]
    # The HPA owns the replica count; a fixed one would be reset on every apply.
    assert "replicas" not in k8s("Deployment")["spec"]
    # At minReplicas a node drain must still be able to evict one pod.
    pdb = k8s("PodDisruptionBudget")["spec"]
    assert isinstance(pdb["minAvailable"], int)
    assert pdb["minAvailable"] < hpa["minReplicas"]


def test_deployment_runs_hardened_with_config_and_secret() -> None:
    pod = pod_spec()
    main = container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    security = main["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    sources = {kind: ref["name"] for source in main["envFrom"] for kind, ref in source.items()}
    assert sources == {
        "configMapRef": k8s("ConfigMap")["metadata"]["name"],
        "secretRef": k8s("Secret")["metadata"]["name"],
    }
    for kind in ("requests", "limits"):
        assert set(main["resources"][kind]) >= {"cpu", "memory"}, kind
    assert {port["name"] for port in main["ports"]} == {"http"}
    # The image's user, so the file system it was built for is the one it runs with.
    user = next(args for name, args in final_stage() if name == "USER")
    assert str(pod["securityContext"]["runAsUser"]) == user.split(":")[0]


# --- image, compose, redis.conf, script, docs ------------------------------------------------


def test_dockerfile_builds_in_stages_and_runs_unprivileged() -> None:
    instructions = dockerfile()
    stages = [args for name, args in instructions if name == "FROM"]
    assert len(stages) >= 2, "a builder stage and a runtime stage"
    builder = stages[0].split()[-1]
    assert stages[0].split()[-2].upper() == "AS", "the builder stage is named"
    build = " ".join(args for name, args in instructions if name == "RUN")
    assert "[server]" in build, "the wheel is installed with the server extra"

    final = final_stage()
    assert any(name == "COPY" and f"--from={builder}" in args for name, args in final)
    users = [args for name, args in final if name == "USER"]
    assert users, "the runtime stage sets a USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), "numeric, so runAsNonRoot can be verified"
    assert uid != "0"
    assert any(name == "HEALTHCHECK" for name, _ in final)
    commands = [args for name, args in final if name == "CMD"]
    assert commands, "the runtime stage has a CMD"
    assert json.loads(commands[-1]) == ["toolref-server", "serve"]
    assert not any(name == "ENTRYPOINT" for name, _ in final)

    # Every file copied from the build context exists (a missing one fails the build).
    for name, args in instructions:
        if name == "COPY" and "--from=" not in args:
            *sources, _ = shlex.split(args)
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    for needed in ("pyproject.toml", "README.md", "client_sdk", "service"):
        assert needed not in ignored, f"{needed} is needed by the build"


def ignored_by_the_build(path: str) -> bool:
    """Whether Dockerfile.dockerignore leaves `path` (from the root) out of the context: a
    pattern matches it or a folder above it (`**` any folders, as Docker reads it)."""
    lines = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    return any(
        fnmatch.fnmatchcase(prefix, pattern) or fnmatch.fnmatchcase(prefix, pattern[3:])
        if pattern.startswith("**/")
        else fnmatch.fnmatchcase(prefix, pattern)
        for pattern in patterns
        for prefix in prefixes
    )


def test_the_build_context_leaves_out_the_js_sdk_and_node_modules() -> None:
    """`COPY client_sdk` takes the folder whole, and the wheel needs only its Python packages:
    the JS SDK beside them (its node_modules over 100 MB once `make` ran npm) must not be
    sent with every build nor copied into the builder."""
    assert ignored_by_the_build("client_sdk/js/node_modules/vitest/package.json")
    assert ignored_by_the_build("client_sdk/js/src/index.ts")
    assert not ignored_by_the_build("client_sdk/toolref/__init__.py")
    assert not ignored_by_the_build("service/toolref_server/routes/savings.html")
    for folder, names, _ in os.walk(ROOT):
        names[:] = [name for name in names if name not in (".git", ".venv")]
        if "node_modules" in names:
            names.remove("node_modules")  # not walked into: it is checked as a whole
            relative = (Path(folder) / "node_modules").relative_to(ROOT).as_posix()
            assert ignored_by_the_build(relative), f"{relative} is sent to docker build"


def test_compose_wires_the_service_to_its_store() -> None:
    doc = compose()
    service, redis = doc["services"]["toolref"], doc["services"]["redis"]
    assert service["depends_on"]["redis"]["condition"] == "service_healthy"
    assert service["healthcheck"]["test"]
    assert redis["healthcheck"]["test"]
    context = (DEPLOY / service["build"]["context"]).resolve()
    assert context == ROOT, "built from the repository root, as the Dockerfile expects"
    assert (context / service["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile"

    mounts = {}
    for volume in redis["volumes"]:
        source, target = str(volume).split(":")[:2]
        mounts[target] = source
    conf_target = next(t for t, s in mounts.items() if s.startswith((".", "/")))
    assert (DEPLOY / mounts[conf_target]).resolve() == DEPLOY / "redis.conf"
    command = [str(part) for part in redis["command"]]
    assert conf_target in command, "the engine is started with the mounted redis.conf"
    assert "--requirepass" in command, "protected mode refuses passwordless network clients"
    data_volume = mounts["/data"]
    assert data_volume in doc["volumes"], "the data volume is declared"


def test_redis_conf_follows_the_operations_doc() -> None:
    conf = redis_conf()
    assert conf["maxmemory-policy"] == recommended_policy()
    assert re.fullmatch(r"[1-9]\d*(b|kb|mb|gb)?", conf["maxmemory"].lower()), "a real limit"
    assert conf["appendonly"] == "yes"
    assert conf["appendfsync"] == "everysec"
    assert conf["protected-mode"] == "yes"


@pytest.mark.engine
def test_redis_conf_loads_in_a_real_engine(tmp_path: Path) -> None:
    """A misspelt directive makes the engine refuse the whole file."""
    from toolref_server.embedded import valkey_server_binary

    try:
        binary = valkey_server_binary()
    except ConfigurationError as exc:
        need(f"no valkey-server: {exc.detail}")
    sock = tmp_path / "v.sock"
    process = subprocess.Popen(
        [binary, str(DEPLOY / "redis.conf"), "--port", "0", "--unixsocket", str(sock)],
        cwd=tmp_path,  # redis.conf writes to the working directory
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        # The socket appears once the whole file is accepted; a bad directive exits first.
        deadline = time.monotonic() + 5
        while not sock.exists():
            if process.poll() is not None:
                out = process.stdout.read().decode() if process.stdout else ""
                pytest.fail(f"valkey-server refused deploy/redis.conf: {out}")
            assert time.monotonic() < deadline, "valkey-server did not start"
            time.sleep(0.01)
        with Redis(unix_socket_path=str(sock)) as client:
            policy = client.config_get("maxmemory-policy")
        assert policy == {"maxmemory-policy": recommended_policy()}
    finally:
        process.terminate()  # SHUTDOWN would leave redis-py retrying the closed socket
        process.wait(5)
        if process.stdout:
            process.stdout.close()


def test_local_cluster_script_is_runnable() -> None:
    script = DEPLOY / "local-cluster.sh"
    assert os.access(script, os.X_OK), "chmod +x deploy/local-cluster.sh"
    checked = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
    # The names its embedded Python imports exist (tests.support from the checkout's root).
    imports = re.findall(r"^from ((?:toolref|tests)[\w.]*) import (\w+)$", script.read_text(), re.M)
    assert ("tests.support.cluster", "LocalCluster") in imports
    for module, name in imports:
        assert hasattr(__import__(module, fromlist=[name]), name), f"{module}.{name}"


def test_operations_doc_lists_every_deploy_file() -> None:
    section = OPERATIONS.read_text().partition("## Deploying")[2].split("\n## ")[0]
    assert section, "docs/operations.md has a Deploying section"
    for path in DEPLOY.iterdir():
        if path.name != "Dockerfile.dockerignore":
            assert f"`{path.name}" in section, f"{path.name} is not described"
    for command in (
        "docker build -f deploy/Dockerfile",
        "docker compose -f deploy/compose.yaml",
        "kubectl apply -f deploy/k8s/",
    ):
        assert command in section


# `(docs/operations.md, "Memory per request")`: a deploy file pointing at a part of a doc.
DOC_POINTER = re.compile(r"\b((?:docs/)?[\w.-]+\.md), \"([^\"]+)\"")


def test_every_doc_section_a_deploy_file_points_at_exists() -> None:
    """Each `FILE.md, "Section"` a deploy file names is a heading of that file, or the bold
    lead of one of its paragraphs (`**Who may read it.**`): the configmap sent readers to
    README.md, "Settings", which README never had (the table is docs/api.md's)."""
    pointers = []
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file():
            where = path.relative_to(ROOT)
            pointers += [(where, *found) for found in DOC_POINTER.findall(path.read_text())]
    assert len(pointers) >= 3, pointers
    for where, doc, section in pointers:
        text = (ROOT / doc).read_text()
        headings = re.findall(r"^#+ (.+?)\s*$", text, re.M)
        leads = re.findall(r"\*\*([^*]+?)\.?\*\*", text)
        assert section in headings + leads, f"{where}: {doc} has no section {section!r}"
