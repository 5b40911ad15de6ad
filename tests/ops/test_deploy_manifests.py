"""The deployment kit in ``deploy/`` holds together (docs/operations.md, "Deploying").

No Kubernetes cluster or image build runs here (deploy/docker/check-image.sh builds and runs
the image by hand), so what can be checked without them is: every YAML parses; the
kustomization lists every manifest; the default kit (``kubectl apply -k deploy/kubernetes``)
applies no Secret, the example Secret comes only with ``overlays/example`` and
``overlays/secrets`` generates it from files git ignores; selectors match the pod's labels and
ports match by name; the ServiceMonitors select the Service and give the jobs the alert rules
select; the pod runs non-root and drains within its termination grace; the container
arguments parse with ``agentrt controller serve``'s own parser; every ``AGENTRT_CONTROLLER_*``
variable set by the Deployment or the Dockerfile names a setting and loads; the ConfigMap's
file is accepted by the controller's config loader and the Secret's key file by its key-file
reader; the probe paths answer 200 on a running controller; the Dockerfile is multi-stage,
non-root and copies only paths that exist; the OpenTelemetry Collector's pipelines name
components it defines; the example vLLM StatefulSet is the set of backends the ConfigMap names,
started with the flags the controller relies on.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml

from agentrt.cli import build_parser
from agentrt_controller.backends.http import VllmBackend
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.cli import banner
from agentrt_controller.service import ControllerConfig, load_config, serve_controller
from agentrt_controller.service.core.tenants import load_key_file
from agentrt_emulator.server import EmulatorConfig, serve_engine

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
#: The controller's manifests (what ``kubectl apply -k deploy/kubernetes`` applies).
BASE = KUBERNETES / "base"
#: The base plus the public example Secret.
EXAMPLE = KUBERNETES / "overlays" / "example"
#: The base plus a Secret generated from the operator's own (git-ignored) files.
SECRETS = KUBERNETES / "overlays" / "secrets"
#: The example vLLM servers the controller's ConfigMap names.
VLLM = KUBERNETES / "vllm"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
ENV_PREFIX = "AGENTRT_CONTROLLER_"

pytestmark = pytest.mark.timeout(60)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _kustomization(folder: Path) -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((folder / "kustomization.yaml").read_text())
    return found


def _manifests(folder: Path = BASE) -> dict[tuple[str, str], dict[str, Any]]:
    """The resources of the kustomization in ``folder`` by ``(kind, name)`` (files only)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for file_name in _kustomization(folder)["resources"]:
        if (folder / file_name).is_dir():
            continue  # another kustomization (an overlay's base)
        for doc in _documents(folder / file_name):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in found, f"{file_name}: a second {key}"
            found[key] = doc
    return found


def _one(kind: str, name: str = "agentrt-controller") -> dict[str, Any]:
    if kind == "Secret":
        return _manifests(EXAMPLE)[(kind, name)]
    return _manifests()[(kind, name)]


def _pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = _one("Deployment")["spec"]["template"]["spec"]
    return spec


def _container() -> dict[str, Any]:
    containers: list[dict[str, Any]] = _pod_spec()["containers"]
    assert len(containers) == 1
    return containers[0]


def _configmap_file(tmp_path: Path) -> Path:
    """The ConfigMap's controller.toml, its key file path pointed at the example Secret's."""
    keys = tmp_path / "keys.toml"
    keys.write_text(_one("Secret", "agentrt-controller-keys")["stringData"]["keys.toml"])
    path = tmp_path / "controller.toml"
    text = _one("ConfigMap")["data"]["controller.toml"]
    path.write_text(text.replace("/etc/agentrt/keys/keys.toml", str(keys)))
    return path


def _container_env() -> dict[str, str]:
    """The container's environment, secretKeyRef values read from the example Secret."""
    env: dict[str, str] = {}
    for variable in _container().get("env", []):
        if "value" in variable:
            env[variable["name"]] = variable["value"]
            continue
        ref = variable["valueFrom"]["secretKeyRef"]
        env[variable["name"]] = _one("Secret", ref["name"])["stringData"][ref["key"]]
    return env


def _dockerfile_env() -> dict[str, str]:
    """The runtime stage's ``ENV`` (``KEY=value`` pairs, continued lines joined)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    runtime = text.split(" AS runtime", 1)[1]
    env: dict[str, str] = {}
    for line in runtime.splitlines():
        if line.startswith("ENV "):
            env |= dict(pair.split("=", 1) for pair in line[4:].split())
    return env


def _image_members() -> set[str]:
    """The workspace folders the image must build: the controller, the emulator and every
    workspace distribution they depend on, transitively (from their ``pyproject.toml``)."""
    folder_of = {
        tomllib.loads(path.read_text())["project"]["name"]: path.parent.name
        for path in ROOT.glob("*/pyproject.toml")
    }
    wanted, todo = set(), ["controller", "emulator"]
    while todo:
        folder = todo.pop()
        if folder in wanted:
            continue
        wanted.add(folder)
        project = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]
        for requirement in project.get("dependencies", []):
            name = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]
            if name in folder_of:
                todo.append(folder_of[name])
    return wanted


CONTROLLER_KIT = {
    ("ConfigMap", "agentrt-controller"),
    ("Deployment", "agentrt-controller"),
    ("Service", "agentrt-controller"),
    ("PodDisruptionBudget", "agentrt-controller"),
    ("ServiceMonitor", "agentrt-controller"),
    ("ServiceMonitor", "agentrt-engines"),
}
EXAMPLE_SECRET = ("Secret", "agentrt-controller-keys")


def test_every_yaml_file_in_deploy_parses_and_the_kustomization_lists_every_manifest() -> None:
    files = sorted(DEPLOY.rglob("*.y*ml"))
    assert len(files) >= 10
    for path in files:
        assert _documents(path), f"{path} is empty"
    listed = set(_kustomization(BASE)["resources"])
    present = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    assert set(_manifests()) == CONTROLLER_KIT
    assert set(_manifests(EXAMPLE)) == {EXAMPLE_SECRET}


def test_the_default_kit_applies_no_secret_and_the_example_one_only_by_its_overlay() -> None:
    # kubectl apply -k deploy/kubernetes: the base, nothing else, and the base holds no key.
    assert _kustomization(KUBERNETES)["resources"] == ["base"]
    assert not [p.name for p in KUBERNETES.glob("*.yaml") if p.name != "kustomization.yaml"]
    for kind, _name in _manifests():
        assert kind != "Secret"
    assert "secretGenerator" not in _kustomization(KUBERNETES)
    assert "secretGenerator" not in _kustomization(BASE)
    # The example overlay: the base plus the example Secret, nothing else.
    assert _kustomization(EXAMPLE)["resources"] == ["../../base", "secret-example.yaml"]
    # The operator's overlay generates the Secret from files git ignores.
    secrets = _kustomization(SECRETS)
    assert secrets["resources"] == ["../../base"]
    (generator,) = secrets["secretGenerator"]
    assert generator["name"] == EXAMPLE_SECRET[1]
    volumes = {volume["name"]: volume for volume in _pod_spec()["volumes"]}
    needed = {item["key"] for item in volumes["keys"]["secret"]["items"]}
    needed |= {
        variable["valueFrom"]["secretKeyRef"]["key"]
        for variable in _container()["env"]
        if "valueFrom" in variable
    }
    assert set(generator["files"]) == needed == {"keys.toml", "cache-salt-secret"}
    ignored = (SECRETS / ".gitignore").read_text().split()
    assert set(generator["files"]) <= set(ignored)
    for file_name in generator["files"]:
        assert not (SECRETS / file_name).exists() or _git_ignores(SECRETS / file_name)


def _git_ignores(path: Path) -> bool:
    git = shutil.which("git")
    if git is None:
        return True  # the .gitignore check above stands alone
    done = subprocess.run(
        [git, "-C", str(ROOT), "check-ignore", "-q", str(path)], timeout=30, check=False
    )
    return done.returncode == 0


def _kustomize(kubectl: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=30, check=False
    )


def _rendered(stdout: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (doc["kind"], doc["metadata"]["name"]): doc
        for doc in yaml.safe_load_all(stdout)
        if doc is not None
    }


def test_kubectl_kustomize_renders_the_overlays_with_their_secrets(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on the PATH (its built-in kustomize renders the kit)")
    example = _kustomize(kubectl, EXAMPLE)
    assert example.returncode == 0, example.stderr
    assert set(_rendered(example.stdout)) == CONTROLLER_KIT | {EXAMPLE_SECRET}
    # The operator's overlay, in a copy of the kit: without its files it renders nothing ...
    copy = tmp_path / "kubernetes"
    shutil.copytree(KUBERNETES, copy)
    for name in ("keys.toml", "cache-salt-secret"):
        (copy / "overlays" / "secrets" / name).unlink(missing_ok=True)
    missing = _kustomize(kubectl, copy / "overlays" / "secrets")
    assert missing.returncode != 0 and "keys.toml" in missing.stderr
    # ... with them, a Secret of their contents that the Deployment names.
    keys = _one("Secret", EXAMPLE_SECRET[1])["stringData"]["keys.toml"]
    (copy / "overlays" / "secrets" / "keys.toml").write_text(keys)
    (copy / "overlays" / "secrets" / "cache-salt-secret").write_text("0123456789abcdef")
    done = _kustomize(kubectl, copy / "overlays" / "secrets")
    assert done.returncode == 0, done.stderr
    rendered = _rendered(done.stdout)
    (secret,) = [doc for (kind, _), doc in rendered.items() if kind == "Secret"]
    assert secret["metadata"]["name"].startswith(EXAMPLE_SECRET[1] + "-")  # content hash
    assert secret["metadata"]["labels"]["app.kubernetes.io/part-of"] == "agentrt"
    assert set(secret["data"]) == {"keys.toml", "cache-salt-secret"}
    pod = rendered[("Deployment", "agentrt-controller")]["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["keys"]["secret"]["secretName"] == secret["metadata"]["name"]
    (container,) = pod["containers"]
    refs = {v["valueFrom"]["secretKeyRef"]["name"] for v in container["env"] if "valueFrom" in v}
    assert refs == {secret["metadata"]["name"]}


def test_kubectl_kustomize_renders_the_kit_with_its_labels_and_unchanged_selectors() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on the PATH (its built-in kustomize renders the kit)")
    done = _kustomize(kubectl, KUBERNETES)
    assert done.returncode == 0, done.stderr
    rendered = _rendered(done.stdout)
    assert set(rendered) == set(_manifests()) == CONTROLLER_KIT  # no Secret by default
    for doc in rendered.values():
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "agentrt"
    deployment = rendered[("Deployment", "agentrt-controller")]
    assert deployment["spec"]["selector"] == _one("Deployment")["spec"]["selector"]
    engines = subprocess.run(
        [kubectl, "kustomize", str(VLLM)], capture_output=True, text=True, timeout=30, check=False
    )
    assert engines.returncode == 0, engines.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(engines.stdout) if doc is not None}
    assert kinds == {"Service", "StatefulSet"}


def test_selectors_match_the_pod_labels_and_ports_match_by_name() -> None:
    deployment, service = _one("Deployment"), _one("Service")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    for selector in (
        deployment["spec"]["selector"]["matchLabels"],
        _one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        service["spec"]["selector"],
    ):
        assert selector and selector.items() <= pod_labels.items()
    port_names = {port["name"] for port in _container()["ports"]}
    assert {port["targetPort"] for port in service["spec"]["ports"]} <= port_names
    # Several replicas behind one Service: a client's programs must not be split between them.
    assert deployment["spec"]["replicas"] > 1
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    volumes = {volume["name"]: volume for volume in _pod_spec()["volumes"]}
    assert volumes["config"]["configMap"]["name"] == _one("ConfigMap")["metadata"]["name"]
    secret = _one("Secret", volumes["keys"]["secret"]["secretName"])
    assert {item["key"] for item in volumes["keys"]["secret"]["items"]} <= set(secret["stringData"])
    mounts = {mount["name"] for mount in _container()["volumeMounts"]}
    assert mounts == set(volumes)


def test_the_service_monitors_select_the_service_and_name_the_jobs_the_alerts_select() -> None:
    service = _one("Service")
    controller_monitor = _one("ServiceMonitor")
    selector = controller_monitor["spec"]["selector"]["matchLabels"]
    # Without kustomize's labels too: the Service carries the labels itself.
    assert selector.items() <= service["metadata"]["labels"].items()
    service_ports = {port["name"] for port in service["spec"]["ports"]}
    assert {e["port"] for e in controller_monitor["spec"]["endpoints"]} <= service_ports
    assert all(e["path"] == "/metrics" for e in controller_monitor["spec"]["endpoints"])
    # prometheus-operator names a ServiceMonitor's job after the Service unless relabelled.
    rules = (DEPLOY / "prometheus" / "alerts.rules.yml").read_text()
    jobs = set(re.findall(r'job="([^"]+)"', rules))
    assert jobs == {service["metadata"]["name"], "agentrt-engines"}
    assert "jobLabel" not in controller_monitor["spec"]
    (engines,) = _one("ServiceMonitor", "agentrt-engines")["spec"]["endpoints"]
    assert {"targetLabel": "job", "replacement": "agentrt-engines"} in engines["relabelings"]
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert {job["job_name"] for job in scrape["scrape_configs"]} == jobs
    (controller_job,) = (
        j for j in scrape["scrape_configs"] if j["job_name"] == service["metadata"]["name"]
    )
    (target,) = controller_job["static_configs"][0]["targets"]
    assert int(target.rsplit(":", 1)[1]) == service["spec"]["ports"][0]["port"]


def test_the_pod_runs_non_root_read_only_and_drains_within_its_termination_grace(
    tmp_path: Path,
) -> None:
    spec, container = _pod_spec(), _container()
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    user = re.search(r"^USER (\d+):(\d+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert user is not None
    assert int(user.group(1)) == spec["securityContext"]["runAsUser"]
    assert int(user.group(2)) == spec["securityContext"]["runAsGroup"]
    # preStop pause, then SIGTERM and the controller's drain, all before the kubelet's SIGKILL.
    pause = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pause[0] == "sleep"
    config = load_config(_configmap_file(tmp_path), env={})
    assert float(pause[1]) + config.shutdown_grace_s < spec["terminationGracePeriodSeconds"]
    strategy = _one("Deployment")["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0


def test_the_container_args_parse_with_the_serve_parser() -> None:
    container = _container()
    args = build_parser().parse_args(["controller", "serve", *container["args"]])
    assert args.config == "/etc/agentrt/controller.toml"
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert args.config in mounts


def test_every_controller_variable_of_the_deployment_and_the_image_is_a_setting(
    tmp_path: Path,
) -> None:
    settings = {field.name for field in dataclasses.fields(ControllerConfig)}
    env = {**_dockerfile_env(), **_container_env()}
    ours = {name: value for name, value in env.items() if name.startswith(ENV_PREFIX)}
    assert {"AGENTRT_CONTROLLER_HOST", "AGENTRT_CONTROLLER_CACHE_SALT_SECRET"} <= set(ours)
    for name in ours:
        assert name.removeprefix(ENV_PREFIX).lower() in settings, name
    config = load_config(_configmap_file(tmp_path), env=ours)
    assert config.host == "0.0.0.0"
    assert config.cache_salt_secret == _container_env()["AGENTRT_CONTROLLER_CACHE_SALT_SECRET"]


def test_the_configmap_config_and_the_example_keys_load(tmp_path: Path) -> None:
    config_file = _configmap_file(tmp_path)
    config = load_config(config_file, env={})
    assert config.port == _container()["ports"][0]["containerPort"]
    assert config.host == "0.0.0.0"
    assert [spec.url for spec in config.backends] == [
        backend["url"] for backend in tomllib.loads(config_file.read_text())["backends"]
    ]
    assert all(spec.priority for spec in config.backends)
    assert "tenants=2(key file" in banner(config)
    assert config.api_key_file is not None
    directory = load_key_file(config.api_key_file)
    # The example hashes are those of the words the Secret's comment names.
    for tenant in ("acme", "beta"):
        found = directory.authenticate(f"Bearer {tenant}-example-key")
        assert found is not None and found.name == tenant
    assert directory.authenticate("Bearer not-a-key") is None


@pytest.mark.anyio
async def test_every_probe_path_answers_200_on_a_running_controller(tmp_path: Path) -> None:
    container = _container()
    paths = {
        container[probe]["httpGet"]["path"]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    healthcheck = re.findall(r"127\.0\.0\.1:(\d+)(/\w+)", DOCKERFILE.read_text())
    assert healthcheck == [("8080", "/readyz")]
    config = load_config(_configmap_file(tmp_path), env={})
    async with serve_engine(EmulatorConfig()) as engine:
        local = dataclasses.replace(
            config,
            host="127.0.0.1",
            port=0,
            api_key_file=None,
            scrape_interval_s=0.2,
            backends=(BackendSpec(engine.base_url),),
        )
        async with serve_controller(local) as url, httpx.AsyncClient() as http:
            # Readiness needs one healthy backend: poll until the first probe round marks it.
            with anyio.fail_after(10):
                while (await http.get(url + "/readyz")).status_code != 200:  # noqa: ASYNC110 - over HTTP, no event to await
                    await anyio.sleep(0.05)
            statuses = {path: (await http.get(url + path)).status_code for path in paths}
    assert statuses == dict.fromkeys(paths, 200)


def test_the_dockerfile_is_multi_stage_non_root_and_copies_only_paths_that_exist() -> None:
    dockerfile = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM \S+ AS (\w+)$", dockerfile, re.MULTILINE)
    assert stages == ["builder", "runtime"]
    runtime = dockerfile.split(" AS runtime", 1)[1]
    assert "COPY --from=builder /opt/agentrt /opt/agentrt" in runtime
    assert not re.search(r"^COPY (?!--from)", runtime, re.MULTILINE), "sources in the runtime"
    assert re.search(r"^USER 10001:10001$", runtime, re.MULTILINE)
    exposed = re.search(r"^EXPOSE (\d+)$", runtime, re.MULTILINE)
    assert exposed is not None
    assert int(exposed.group(1)) == _container()["ports"][0]["containerPort"]
    sources = re.findall(r"^COPY (?!--from)(\S+) ", dockerfile, re.MULTILINE)
    members = _image_members()
    assert sorted(source.rstrip("/") for source in sources) == sorted(members)
    wheels = re.search(r"--wheel-dir /wheels\s+((?:\./\w+\s+)+)", dockerfile.replace("\\\n", " "))
    assert wheels is not None
    assert sorted(wheels.group(1).split()) == sorted(f"./{member}" for member in members)
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for source in sources:
        assert (ROOT / source / "pyproject.toml").exists(), source
        assert source.rstrip("/") not in ignored
    assert {"tests", "docs", ".venv"} <= ignored
    assert 'ENTRYPOINT ["agentrt", "controller", "serve"]' in dockerfile


def test_the_collector_pipelines_name_only_components_it_defines() -> None:
    collector = yaml.safe_load((DEPLOY / "otel" / "collector.yaml").read_text())
    pipelines = collector["service"]["pipelines"]
    assert set(pipelines) == {"traces", "metrics"}
    for pipeline in pipelines.values():
        for section in ("receivers", "processors", "exporters"):
            assert set(pipeline[section]) <= set(collector[section]), (section, pipeline)
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")


def test_the_dashboard_panels_use_the_datasource_variable_and_do_not_overlap() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "agentrt.json").read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24
        area = {(box["x"] + dx, box["y"] + dy) for dx in range(box["w"]) for dy in range(box["h"])}
        assert not area & cells, panel["title"]
        cells |= area
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"]


def _vllm_example() -> tuple[dict[str, Any], dict[str, Any]]:
    """The example's headless Service and StatefulSet."""
    listed = yaml.safe_load((VLLM / "kustomization.yaml").read_text())["resources"]
    docs = {doc["kind"]: doc for name in listed for doc in _documents(VLLM / name)}
    assert set(docs) == {"Service", "StatefulSet"}
    return docs["Service"], docs["StatefulSet"]


def _flags(args: list[str]) -> dict[str, str]:
    """``--name=value`` and bare ``--name`` arguments as ``{name: value or ""}``."""
    return {arg[2:].split("=", 1)[0]: arg.partition("=")[2] for arg in args if arg.startswith("--")}


def test_the_vllm_example_is_what_the_controller_configmap_expects(tmp_path: Path) -> None:
    service, statefulset = _vllm_example()
    config = load_config(_configmap_file(tmp_path), env={})
    # The ConfigMap's backends are the StatefulSet's pods behind its headless Service.
    assert service["spec"]["clusterIP"] == "None"
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    (port,) = service["spec"]["ports"]
    pods = [
        f"{statefulset['metadata']['name']}-{i}" for i in range(statefulset["spec"]["replicas"])
    ]
    expected = [f"http://{pod}.{service['metadata']['name']}:{port['port']}" for pod in pods]
    assert [spec.url for spec in config.backends] == expected
    assert {spec.kind for spec in config.backends} == {"vllm"}
    pod = statefulset["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert (
        statefulset["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    )
    (container,) = pod["spec"]["containers"]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}
    # The flags the controller relies on (docs/operations.md, "The vLLM flags that matter").
    flags = _flags(container["args"])
    assert ("scheduling-policy" in flags and flags["scheduling-policy"] == "priority") == all(
        spec.priority for spec in config.backends
    )
    assert {"enable-prefix-caching", "enable-prompt-tokens-details"} <= set(flags)
    assert int(flags["port"]) == container["ports"][0]["containerPort"]
    # The window's cap: the batch plus the waiting target (vLLM does not publish its batch).
    assert (
        config.admission.max_window == int(flags["max-num-seqs"]) + config.admission.target_waiting
    )
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == VllmBackend.health_path
    # The engines' ServiceMonitor scrapes this Service.
    (engines,) = _one("ServiceMonitor", "agentrt-engines")["spec"]["endpoints"]
    monitor = _one("ServiceMonitor", "agentrt-engines")["spec"]["selector"]["matchLabels"]
    assert monitor.items() <= service["metadata"]["labels"].items()
    assert engines["port"] == port["name"]
