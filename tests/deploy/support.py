"""What the deploy tests compare the deployment files against: names taken from the code itself."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import shlex
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from pydantic_settings import BaseSettings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCS = ROOT / "docs" / "operations.md"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "docker-compose.yml"
CLUSTER_COMPOSE = DEPLOY / "docker-compose.cluster.yml"
CLUSTER_INIT = DEPLOY / "redis-cluster-init.sh"
K8S_CLUSTER = DEPLOY / "k8s-cluster"  # overlays beside the base, not in it: kustomize refuses a root inside the one it builds on
K8S_KAFKA = DEPLOY / "k8s-kafka"
KEDA = K8S / "keda.yaml"
KEDA_PARTITIONS = K8S_CLUSTER / "keda-partitions.yaml"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "streamcrew.json"
PACKAGES = ("streams", "agents", "consumers")
ENV_NAME = re.compile(r"\bSTREAMCREW_[A-Z0-9_]*[A-Z0-9]")
METRIC_NAME = re.compile(r"\bstreamcrew_[a-z0-9_]+")
# The Redis image every deploy file runs: a supported release the suite and bench_cluster were run on (bench/README.md,
# "Redis Cluster by server version"; the suite also runs on Redis 7.0.15 and Valkey 8.0.1).
REDIS_IMAGE = "redis:8.0"
NOT_THE_CLI = frozenset({"-n", "--namespace", "-p", "--project-name", "-t", "--tag"})


def binary(name: str) -> str:
    """Path of a Prometheus binary; fails under CI=true, skips elsewhere, when it is missing."""
    path = shutil.which(name)
    if path:
        return path
    reason = f"`{name}` not on PATH: run deploy/ci-deps.sh (apt-get install prometheus)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def load_yaml_all(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def only(path: Path, kind: str) -> dict[str, Any]:
    """The one object of ``kind`` in a manifest file."""
    (found,) = [doc for doc in load_yaml_all(path) if doc.get("kind") == kind]
    return dict(found)


def cluster_overlay_settings() -> tuple[str, int, int]:
    """(prefix, partitions, worker concurrency) of deploy/k8s-cluster: the base's prefix and worker, the overlay's N."""
    prefix = only(K8S / "configmap.yaml", "ConfigMap")["data"]["STREAMCREW_PREFIX"]
    partitions = int(only(K8S_CLUSTER / "configmap-partitions.yaml", "ConfigMap")["data"]["STREAMCREW_PARTITIONS"])
    (worker,) = only(K8S / "worker.yaml", "Deployment")["spec"]["template"]["spec"]["containers"]
    concurrency = int({e["name"]: e["value"] for e in worker["env"] if "value" in e}["STREAMCREW_CONCURRENCY"])
    return prefix, partitions, concurrency


def project_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


@cache
def settings_classes() -> tuple[type[BaseSettings], ...]:
    """Every ``BaseSettings`` subclass defined in a ``settings.py`` or ``config.py`` of our packages."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.stem in ("settings", "config"):
                importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
    found: list[type[BaseSettings]] = []
    todo: list[type[BaseSettings]] = [BaseSettings]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.split(".")[0] in PACKAGES and sub not in found:
                found.append(sub)
    return tuple(found)


@cache
def env_vars() -> dict[str, list[str]]:
    """``STREAMCREW_*`` variable -> the settings classes that read it."""
    out: dict[str, list[str]] = {}
    for cls in settings_classes():
        prefix = str(cls.model_config.get("env_prefix", ""))
        for name, field in cls.model_fields.items():
            for alias in (prefix + name, field.alias, field.validation_alias):
                if isinstance(alias, str):
                    out.setdefault(alias.upper(), []).append(cls.__name__)
    return out


def env_names_in(text: str) -> set[str]:
    return set(ENV_NAME.findall(text))


@cache
def cli() -> Any:
    """The click group of ``streamcrew`` (typer may vendor click, so it is duck-typed here)."""
    from consumers.cli import app

    command = typer.main.get_command(app)
    assert hasattr(command, "commands")
    return command


def resolve_command(argv: list[str]) -> tuple[Any, list[str]]:
    """The click command an argument list runs, and the arguments left for it; fails on an unknown name."""
    command = cli()
    path = ["streamcrew"]
    rest = list(argv)
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        sub = command.commands.get(name)
        assert sub is not None, f"`{' '.join(path)} {name}` is not a command (have: {', '.join(sorted(command.commands))})"
        command, path = sub, [*path, name]
    return command, rest


def check_invocation(argv: list[str], where: str) -> dict[str, str]:
    """Assert a command line names a real command and real options; returns option -> value."""
    command, rest = resolve_command(argv)
    params = {opt: p for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    values: dict[str, str] = {}
    i = 0
    while i < len(rest):
        token = rest[i]
        if token.startswith("--"):
            name, eq, inline = token.partition("=")
            assert name in params, f"{where}: `{command.name}` has no option {name} (have: {', '.join(sorted(params))})"
            param = params[name]
            if getattr(param, "is_flag", False):
                values[name] = "true"
            elif eq:
                values[name] = inline
            else:
                assert i + 1 < len(rest), f"{where}: {name} needs a value"
                values[name] = rest[i + 1]
                i += 1
        i += 1
    return values


def command_lines_in_docs(text: str) -> list[list[str]]:
    """Argument lists following ``streamcrew`` in the fenced code blocks of a Markdown file."""
    out: list[list[str]] = []
    in_block = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            in_block = not in_block
            continue
        if not in_block:
            continue
        code = line.split("#", 1)[0].strip()
        if not code:
            continue
        try:
            tokens = shlex.split(code)
        except ValueError:
            continue
        for i, token in enumerate(tokens):
            if i and tokens[i - 1] in NOT_THE_CLI:  # `kubectl -n streamcrew ...`, `docker compose -p streamcrew ...`
                continue
            if token == "streamcrew" and i + 1 < len(tokens) and re.fullmatch(r"[a-z][a-z-]*", tokens[i + 1]):
                args = []
                for t in tokens[i + 1:]:
                    if t in ("|", "&&", ";", ">", "2>&1"):
                        break
                    args.append(t)
                out.append(args)
                break
    return out
