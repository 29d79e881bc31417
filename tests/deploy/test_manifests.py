"""Compose, Kubernetes, Prometheus, Grafana and the operations doc name only what the code has.

Commands and options are checked against the typer app, ``STREAMCREW_*`` variables against the
settings classes, ports against the defaults in code, stream and group names against streams.keys,
metric names against the metrics the processes register.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY, CollectorRegistry

from consumers.gateway.settings import DEFAULT_GATEWAY_PORT
from consumers.kafka_bridge.settings import DEFAULT_KAFKA_BRIDGE_METRICS_PORT, KafkaBridgeSettings
from consumers.mock_llm import DEFAULT_PORT as MOCK_LLM_PORT
from consumers.notifier.settings import DEFAULT_NOTIFIER_METRICS_PORT, NotifierSettings
from consumers.settings import DEFAULT_WORKER_METRICS_PORT, WorkerSettings
from streams.gauges import StreamGauges
from streams.keys import NOTIFIER_GROUP, WORKERS_GROUP, Keys
from tests.deploy.support import (
    ALERTS, COMPOSE, DASHBOARD, DEPLOY, DOCS, K8S, K8S_KAFKA, KEDA, KEDA_PARTITIONS, METRIC_NAME, PROMETHEUS_CONFIG, REDIS_IMAGE,
    ROOT, check_invocation, command_lines_in_docs, env_names_in, env_vars, load_yaml_all, project_version,
)

METRICS_PORTS = {"worker": DEFAULT_WORKER_METRICS_PORT, "notifier": DEFAULT_NOTIFIER_METRICS_PORT,
                 "kafka-bridge": DEFAULT_KAFKA_BRIDGE_METRICS_PORT}
GRACE_SETTINGS = {"worker": WorkerSettings, "notifier": NotifierSettings, "kafka-bridge": KafkaBridgeSettings}
IMAGE = f"streamcrew:{project_version()}"


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def ours(services: dict[str, Any]) -> dict[str, Any]:
    """Compose services that run the streamcrew image."""
    return {name: s for name, s in services.items() if str(s.get("image", "")).startswith("streamcrew:")}


def k8s_objects() -> list[dict[str, Any]]:
    paths = [*sorted(K8S.glob("*.yaml")), *sorted(p for p in K8S_KAFKA.glob("*.yaml") if p.name != "kustomization.yaml")]
    return [doc for path in paths for doc in load_yaml_all(path)]


def deployments() -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in k8s_objects() if o.get("kind") == "Deployment"}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def configmap() -> dict[str, str]:
    (cm,) = [o for o in k8s_objects() if o.get("kind") == "ConfigMap"]
    return dict(cm["data"])


def effective_grace_s(command: str, env: dict[str, str], options: dict[str, str]) -> float:
    """The drain grace a process gets: --grace, else STREAMCREW_GRACE_S, else the settings default."""
    if "--grace" in options:
        return float(options["--grace"])
    if "STREAMCREW_GRACE_S" in env:
        return float(env["STREAMCREW_GRACE_S"])
    return float(GRACE_SETTINGS[command].model_fields["grace_s"].default)


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|m)", duration)
    assert match, f"unexpected duration {duration!r}"
    return int(match[1]) * {"ms": 0.001, "s": 1, "m": 60}[match[2]]


def deploy_text_files() -> list[Path]:
    return [p for p in sorted(DEPLOY.rglob("*")) if p.is_file()] + [DOCS]


# -- every file parses -------------------------------------------------------------------------

def test_every_yaml_and_json_file_parses() -> None:
    for path in sorted(DEPLOY.rglob("*.y*ml")):
        assert load_yaml_all(path), f"{path} is empty"
    assert json.loads(DASHBOARD.read_text())["panels"]


def test_kustomization_lists_every_manifest_but_the_secrets_example() -> None:
    (kustomization,) = load_yaml_all(K8S / "kustomization.yaml")
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert listed == present
    # A listed Secret would be applied again by every `kubectl apply -k`, its empty example values over the operator's
    # keys (gateway auth and webhook signatures off): the Secret is made on its own, once
    assert not [o for r in listed for o in load_yaml_all(K8S / r) if o.get("kind") == "Secret"]
    assert {"name": "streamcrew", "newName": "streamcrew", "newTag": project_version()} in kustomization["images"]


# -- names the code defines ----------------------------------------------------------------------

def test_every_streamcrew_variable_named_in_deploy_and_docs_is_a_setting() -> None:
    known = env_vars()
    assert {"STREAMCREW_REDIS_URL", "STREAMCREW_GRACE_S", "STREAMCREW_METRICS_PORT"} <= set(known)
    unknown = {
        f"{name} ({path.relative_to(ROOT)})"
        for path in deploy_text_files() for name in env_names_in(path.read_text()) if name not in known
    }
    assert not unknown, f"not a field of any settings class: {sorted(unknown)}; settings read: {sorted(known)}"


def test_compose_commands_and_options_exist() -> None:
    for name, service in ours(compose()["services"]).items():
        check_invocation([str(a) for a in service["command"]], f"compose service {name}")


def test_k8s_commands_and_options_exist() -> None:
    for name, deployment in deployments().items():
        c = container(deployment)
        if c["image"].startswith("streamcrew"):
            check_invocation([str(a) for a in c["args"]], f"k8s deployment {name}")


def test_docs_commands_and_options_exist() -> None:
    lines = command_lines_in_docs(DOCS.read_text())
    assert len(lines) >= 5, "docs/operations.md should show the streamcrew commands an operator runs"
    for argv in lines:
        check_invocation(argv, f"docs/operations.md: streamcrew {' '.join(argv)}")


def test_metric_names_in_rules_dashboard_and_keda_are_exported(redis_url: str) -> None:
    # Every metric registered by a process module, and the stream gauges (read from a real Redis)
    import importlib

    for path in [*ROOT.glob("*/metrics.py"), *ROOT.glob("*/*/metrics.py")]:
        if path.relative_to(ROOT).parts[0] in ("streams", "agents", "consumers"):
            importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
    gauges = CollectorRegistry()
    gauges.register(StreamGauges(redis_url, Keys("deploy-test-names"), cache_s=0))
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "summary": ("_count", "_sum")}
    exported = {
        family.name + suffix
        for registry in (REGISTRY, gauges) for family in registry.collect() if family.name.startswith("streamcrew_")
        for suffix in suffixes.get(family.type, ("",))
    }
    named = {
        path.name: set(METRIC_NAME.findall(path.read_text())) for path in (ALERTS, DASHBOARD, KEDA, KEDA_PARTITIONS)
    }
    missing = {f: sorted(n - exported) for f, n in named.items() if n - exported}
    assert not missing, f"metrics named but exported by no process: {missing}; exported: {sorted(exported)}"


# -- the Dockerfile ---------------------------------------------------------------------------------

def test_dockerfile_is_slim_non_root_with_the_streamcrew_entry_point() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert froms and froms[-1] == "python:3.11-slim"
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["streamcrew"\]', text, re.M)
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"crewai", "kafka"} <= set(extras) and '".[crewai,kafka]"' in text
    exposed = {int(p) for line in re.findall(r"^EXPOSE (.+)$", text, re.M) for p in line.split()}
    assert exposed == {DEFAULT_GATEWAY_PORT, DEFAULT_WORKER_METRICS_PORT, DEFAULT_NOTIFIER_METRICS_PORT,
                       DEFAULT_KAFKA_BRIDGE_METRICS_PORT, MOCK_LLM_PORT}
    for copied in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
        assert (ROOT / copied).exists(), f"Dockerfile copies {copied}, which is not in the repository"


# -- compose ------------------------------------------------------------------------------------------

def test_compose_has_the_whole_stack() -> None:
    services = compose()["services"]
    assert {"redis", "gateway", "worker", "notifier", "kafka-bridge", "mock-llm", "prometheus", "grafana"} <= set(services)
    redis = services["redis"]
    assert redis["image"] == REDIS_IMAGE
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--appendfsync everysec" in command
    assert services["worker"]["deploy"]["replicas"] == 3
    for name, service in ours(services).items():
        assert service["image"] == IMAGE, f"{name}: image {service['image']}, the project is {IMAGE}"
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}


def test_compose_ports_match_the_code() -> None:
    services = ours(compose()["services"])
    gateway = check_invocation(services["gateway"]["command"], "gateway")
    assert int(gateway["--port"]) == DEFAULT_GATEWAY_PORT and gateway["--host"] == "0.0.0.0"
    # published on this host only: the stack's gateway has no API keys unless .env sets them
    assert f"127.0.0.1:{DEFAULT_GATEWAY_PORT}:{DEFAULT_GATEWAY_PORT}" in services["gateway"]["ports"]
    assert services["gateway"]["environment"]["STREAMCREW_API_KEYS"] == "${STREAMCREW_API_KEYS:-}"
    for name, default in METRICS_PORTS.items():
        assert int(check_invocation(services[name]["command"], name)["--metrics-port"]) == default
    mock = check_invocation(services["mock-llm"]["command"], "mock-llm")
    assert int(mock["--port"]) == MOCK_LLM_PORT and mock["--host"] == "0.0.0.0"
    assert services["worker"]["environment"]["STREAMCREW_LLM_BASE_URL"] == f"http://mock-llm:{MOCK_LLM_PORT}/v1"
    for name, service in services.items():
        if name != "mock-llm":
            assert service["environment"]["STREAMCREW_REDIS_URL"] == "redis://redis:6379/0"


def test_compose_stop_grace_outlasts_the_drain() -> None:
    for name, service in ours(compose()["services"]).items():
        command = service["command"][0]
        if command in GRACE_SETTINGS:
            grace = effective_grace_s(command, service.get("environment", {}), check_invocation(service["command"], name))
            assert seconds(service["stop_grace_period"]) >= grace + 5, f"{name}: stop_grace_period vs drain grace {grace}s"


def test_prometheus_scrapes_every_process_on_its_port() -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    targets: set[str] = set()
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            targets |= set(static["targets"])
        for sd in job.get("dns_sd_configs", []):
            targets |= {f"{n}:{sd['port']}" for n in sd["names"]}
    assert {f"gateway:{DEFAULT_GATEWAY_PORT}", f"worker:{DEFAULT_WORKER_METRICS_PORT}",
            f"notifier:{DEFAULT_NOTIFIER_METRICS_PORT}", f"kafka-bridge:{DEFAULT_KAFKA_BRIDGE_METRICS_PORT}"} <= targets
    assert config["rule_files"] == [ALERTS.name]
    prometheus = compose()["services"]["prometheus"]
    assert "./prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]


def test_grafana_is_provisioned_with_the_dashboard_and_datasource() -> None:
    grafana = compose()["services"]["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"] if v.startswith("./"))
    provisioning = DEPLOY / "grafana" / "provisioning"
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert datasource["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "streamcrew.yml").read_text())["providers"]
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == datasource["uid"], panel["title"]


# -- Kubernetes -----------------------------------------------------------------------------------------

def test_k8s_probes_and_ports_match_the_code() -> None:
    d = deployments()
    assert {"gateway", "worker", "notifier", "kafka-bridge"} <= set(d)
    gateway = container(d["gateway"])
    options = check_invocation(gateway["args"], "gateway")
    assert int(options["--port"]) == DEFAULT_GATEWAY_PORT and options["--host"] == "0.0.0.0"
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": DEFAULT_GATEWAY_PORT}
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": DEFAULT_GATEWAY_PORT}
    assert [p["containerPort"] for p in gateway["ports"]] == [DEFAULT_GATEWAY_PORT]
    for name, port in METRICS_PORTS.items():
        c = container(d[name])
        assert int(check_invocation(c["args"], name)["--metrics-port"]) == port
        assert c["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": port}
        assert [p["containerPort"] for p in c["ports"]] == [port]
        assert d[name]["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    services = {o["metadata"]["name"]: o for o in k8s_objects() if o.get("kind") == "Service"}
    assert services["gateway"]["spec"]["ports"][0]["targetPort"] == DEFAULT_GATEWAY_PORT
    assert services["worker-metrics"]["spec"]["ports"][0]["targetPort"] == DEFAULT_WORKER_METRICS_PORT
    assert services["notifier-metrics"]["spec"]["ports"][0]["targetPort"] == DEFAULT_NOTIFIER_METRICS_PORT
    assert services["kafka-bridge-metrics"]["spec"]["ports"][0]["targetPort"] == DEFAULT_KAFKA_BRIDGE_METRICS_PORT


# The Secret's keys each process reads, and the settings classes that read them there
SECRET_KEYS = {"worker": ({"STREAMCREW_REDIS_URL", "STREAMCREW_LLM_API_KEYS"}, {"WorkerSettings", "LLMSettings"}),
               "notifier": ({"STREAMCREW_REDIS_URL", "STREAMCREW_WEBHOOK_SECRET"}, {"NotifierSettings"}),
               "gateway": ({"STREAMCREW_REDIS_URL", "STREAMCREW_API_KEYS"}, {"GatewaySettings"}),
               "kafka-bridge": ({"STREAMCREW_REDIS_URL", "STREAMCREW_KAFKA_SASL_PASSWORD"}, {"KafkaBridgeSettings"})}


def test_k8s_each_process_gets_only_the_secret_keys_it_reads() -> None:
    # envFrom a whole Secret gave the internet-facing gateway the LLM keys and the webhook signing secret too
    d, readers = deployments(), env_vars()
    secret_keys = {k for o in k8s_objects() if o.get("kind") == "Secret" for k in o.get("stringData", {})}
    secret_keys |= set(yaml.safe_load((K8S / "secret.example.yaml").read_text())["stringData"])
    for name, (expected, classes) in SECRET_KEYS.items():
        c = container(d[name])
        assert not [s for s in c.get("envFrom", []) if "secretRef" in s], f"{name} takes the whole Secret"
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
        assert set(refs) == expected, (name, sorted(refs))
        for key, ref in refs.items():
            assert ref["name"] == "streamcrew" and ref["key"] == key and key in secret_keys, (name, ref)
            assert set(readers[key]) & classes, f"{name} is given {key}, which none of {sorted(classes)} reads"
            assert ref.get("optional", False) == (key != "STREAMCREW_REDIS_URL"), (name, ref)  # only the URL is required


def test_k8s_termination_grace_outlasts_the_drain() -> None:
    shared = configmap()
    for name, settings in GRACE_SETTINGS.items():
        deployment = deployments()[name]
        c = container(deployment)
        env = {**shared, **{e["name"]: e["value"] for e in c.get("env", []) if "value" in e}}
        grace = effective_grace_s(name, env, check_invocation(c["args"], name))
        assert settings.model_fields["grace_s"] is not None
        assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= grace + 5, name


def test_k8s_workers_scale_on_the_sum_over_every_lane_and_resumed_stream_from_one() -> None:
    (scaled,) = [o for o in k8s_objects() if o.get("kind") == "ScaledObject"]
    spec = scaled["spec"]
    assert spec["scaleTargetRef"]["name"] == "worker" and "replicas" not in deployments()["worker"]["spec"]
    assert spec["minReplicaCount"] == 1  # a delayed retry is promoted only by a running worker
    keys = Keys(configmap()["STREAMCREW_PREFIX"])
    concurrency = int({e["name"]: e["value"] for e in container(deployments()["worker"]).get("env", []) if "value" in e}["STREAMCREW_CONCURRENCY"])
    # The HPA takes the max of the triggers' replica counts: the sum over the streams is one prometheus trigger
    # (its query runs in tests/deploy/test_keda_prometheus.py), one replica per STREAMCREW_CONCURRENCY jobs
    (summed,) = [t["metadata"] for t in spec["triggers"] if t["type"] == "prometheus"]
    assert int(summed["threshold"]) == concurrency and summed["activationThreshold"] == "0"
    assert summed["ignoreNullValues"] == "false"  # no samples is an error, not a 0 that lets the HPA scale down
    assert re.fullmatch(r"http://[a-z0-9.-]+:9090", summed["serverAddress"])
    triggers = [t for t in spec["triggers"] if t["type"] != "prometheus"]
    assert {t["type"] for t in triggers} == {"redis-streams"}
    # the resumed streams too: a capped tenant's backlog ends as jobs let go from its parked list, run from there while
    # the lanes are empty, and a scale to zero then would cut them off and strand the rest
    assert {t["metadata"]["stream"] for t in triggers} == set(keys.work_streams)
    for stream in keys.work_streams:
        on_lane = [t["metadata"] for t in triggers if t["metadata"]["stream"] == stream]
        lag = [m for m in on_lane if "lagCount" in m]
        pending = [m for m in on_lane if "pendingEntriesCount" in m]
        assert len(lag) == 1 and len(pending) == 1, f"{stream}: one lag and one pending trigger"
        # at least the summed trigger's threshold: one stream's trigger never asks for more replicas than the sum does
        assert lag[0]["activationLagCount"] == "0" and int(lag[0]["lagCount"]) >= concurrency
        assert int(pending[0]["pendingEntriesCount"]) == concurrency
        for m in on_lane:
            assert m["consumerGroup"] == WORKERS_GROUP
            assert m["address"].split(".")[0] == "redis" and m["address"].endswith(":6379")
    assert WORKERS_GROUP == "workers" and NOTIFIER_GROUP == "notifier"  # the alert rules' group labels


def test_k8s_images_and_redis() -> None:
    for name, deployment in deployments().items():
        assert container(deployment)["image"] == "streamcrew", f"{name}: tagged by the kustomization's images"
    (redis,) = [o for o in k8s_objects() if o.get("kind") == "StatefulSet"]
    c = container(redis)
    assert c["image"] == REDIS_IMAGE and "--appendonly" in c["args"]


# -- docs/operations.md ---------------------------------------------------------------------------------

def images_in_deploy() -> set[str]:
    found = {str(s["image"]) for s in compose()["services"].values()}
    found |= {c["image"] for o in k8s_objects() if o.get("kind") in ("Deployment", "StatefulSet")
              for c in o["spec"]["template"]["spec"]["containers"]}
    return found | {IMAGE}


def test_docs_name_only_images_and_ports_the_stack_has() -> None:
    text = DOCS.read_text()
    images = set(re.findall(r"`((?:prom/prometheus|grafana/grafana|redis|streamcrew):(?:v?\d[\w.\-]*|latest))`", text))
    assert images, "docs/operations.md should name the images"
    assert images <= images_in_deploy(), f"images not in compose or k8s: {sorted(images - images_in_deploy())}"
    published = {int(p.split(":")[-2]) for s in compose()["services"].values() for p in s.get("ports", [])}  # [host_ip:]host:container
    local = {int(p) for p in re.findall(r"(?:localhost|127\.0\.0\.1):(\d+)", text)}
    assert local and local <= published, f"ports not published by compose: {sorted(local - published)}"
    code_ports = {DEFAULT_GATEWAY_PORT, DEFAULT_WORKER_METRICS_PORT, DEFAULT_NOTIFIER_METRICS_PORT, DEFAULT_KAFKA_BRIDGE_METRICS_PORT, MOCK_LLM_PORT}
    named = {int(p) for p in re.findall(r"\bport (\d{4,5})\b", text)}
    assert named <= code_ports | published | {6379}, f"ports named but not used: {sorted(named - code_ports - published)}"


def test_docs_have_a_runbook_entry_per_alert() -> None:
    text = DOCS.read_text()
    headings = {m.strip() for m in re.findall(r"^#{2,4} (.+)$", text, re.M)}
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            assert rule["alert"] in headings, f"no runbook heading for {rule['alert']}"
            anchor = rule["annotations"]["runbook"].split("#", 1)[1]
            assert anchor == rule["alert"].lower()


@pytest.mark.parametrize("variable", ["STREAMCREW_GRACE_S", "STREAMCREW_LEASE_S", "STREAMCREW_CONCURRENCY",
                                      "STREAMCREW_RESULTS_MAXLEN", "STREAMCREW_JOB_TTL_S"])
def test_docs_cover_sizing_and_retention(variable: str) -> None:
    assert variable in DOCS.read_text()


def test_dashboard_has_a_workflows_row() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    titles = [p["title"] for p in panels]
    row = titles.index("Workflows")
    assert panels[row]["type"] == "row"
    below = " ".join(t["expr"] for p in panels[row + 1:] if p["type"] != "row" for t in p.get("targets", []))
    assert "streamcrew_workflows_total" in below and "streamcrew_workflow_duration_seconds_bucket" in below


@pytest.mark.parametrize("root", ["k8s", "k8s-cluster", "k8s-kafka"])
def test_each_kustomization_builds(root: str) -> None:
    # `kubectl apply -k` of each, as the docs say (before: the cluster overlay, inside the base it builds on, was a
    # "cycle detected" error); the Kafka bridge only where it is asked for
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not on PATH (its kustomize builds the overlays)")
    done = subprocess.run([kubectl, "kustomize", str(DEPLOY / root)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    kinds = [(o["kind"], o["metadata"]["name"]) for o in yaml.safe_load_all(done.stdout) if o]
    assert (("Deployment", "kafka-bridge") in kinds) == (root == "k8s-kafka"), kinds
    assert ("Deployment", "worker") in kinds
