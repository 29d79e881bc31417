"""`streamcrew demo` spends no tokens unless asked, leaves no keys in an outside Redis, no Redis server or folder
after SIGTERM or SIGHUP, and prints curl commands that paste."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis as sync_redis

from consumers.mock_llm import running_mock_llm
from consumers.processes import streamcrew_cmd

SMALL = ("--requests", "20", "--rate", "0", "--no-chaos")


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without any STREAMCREW_ setting (no Redis, no LLM leaks in), plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("STREAMCREW_")}, **extra}


def run_demo(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(streamcrew_cmd("demo", *args), capture_output=True, text=True, timeout=100, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_use_llm_without_an_endpoint_is_a_usage_error() -> None:
    # Given no STREAMCREW_LLM_BASE_URL, When --use-llm is asked for, Then the demo refuses before starting anything
    done = subprocess.run(streamcrew_cmd("demo", "--use-llm"), capture_output=True, text=True, timeout=60, env=clean_env())
    assert done.returncode == 2
    assert "STREAMCREW_LLM_BASE_URL" in one_line(done.stderr)


@pytest.fixture
def outside(redis_url: str, prefix: str) -> Iterator[sync_redis.Redis]:
    """The test Redis, holding keys of other prefixes (one that starts like a demo's) that the demo must not touch."""
    client = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    client.set(f"{prefix}:bystander", "stay")
    client.xadd(f"{prefix}-demo-0:results", {"other": "demo"})
    yield client
    for key in client.scan_iter(match=f"{prefix}*"):
        client.unlink(key)
    client.close()


def demo_keys_left(outside: sync_redis.Redis, prefix: str) -> set[str]:
    """The keys of ``prefix`` the demo made (the bystanders aside), which are untouched."""
    assert outside.get(f"{prefix}:bystander") == "stay" and outside.xlen(f"{prefix}-demo-0:results") == 1
    return set(outside.scan_iter(match=f"{prefix}*")) - {f"{prefix}:bystander", f"{prefix}-demo-0:results"}


@pytest.mark.parametrize("use_llm", [False, True], ids=["offline-deletes", "use-llm-keep"])
async def test_demo_spends_no_tokens_unless_asked_and_leaves_no_keys_unless_kept(
    outside: sync_redis.Redis, redis_url: str, prefix: str, use_llm: bool,
) -> None:
    # Given an LLM endpoint in the environment (as the README has users export for their own workers) and an
    # outside Redis that already holds keys of other prefixes
    async with running_mock_llm() as mock:
        assert mock.app is not None
        env = clean_env(STREAMCREW_LLM_BASE_URL=mock.openai_base_url, STREAMCREW_LLM_API_KEYS="sk-test-key")
        # When the demo runs there (with --json, whose stdout is the report alone), with --use-llm --keep or without
        flags = ("--requests", "6", "--use-llm", "--keep") if use_llm else ("--requests", "20")
        args = (*flags, "--rate", "0", "--no-chaos", "--json", "--redis-url", redis_url, "--prefix", prefix)
        done = await asyncio.to_thread(run_demo, *args, env=env)
        report = json.loads(done.stdout)
        assert report["ok"] is True
        left = demo_keys_left(outside, prefix)
        if use_llm:
            # Then it called the endpoint and names it; its keys stay, under the prefix the report names
            assert len(mock.app.served) > 0 and report["offline"] is False
            assert report["llm"].startswith(mock.openai_base_url)
            demo_prefix = report["prefix"]
            assert demo_prefix.startswith(f"{prefix}-demo-") and demo_prefix != f"{prefix}-demo-0"
            assert f"{demo_prefix}:results" in left and all(k.startswith(f"{demo_prefix}:") for k in left)
            assert "kept the demo's keys" in one_line(done.stderr)
        else:
            # Then the endpoint got no request (the crews answered through the offline model; both outputs say
            # why), and its keys are gone
            assert mock.app.served == []
            assert report["offline"] is True and set(report["tokens"]) == {"offline-mock"}
            assert "offline model" in report["llm"] and "--use-llm" in report["llm"] and mock.openai_base_url in report["llm"]
            assert "--use-llm" in one_line(done.stderr)
            assert left == set()
            assert "deleted the demo's" in one_line(done.stderr)
        # And it named that Redis on stderr, never the key
        assert f"Redis at {redis_url}" in one_line(done.stderr)
        assert "sk-test-key" not in done.stdout + done.stderr


class ServedDemo:
    """``streamcrew demo --serve`` on its embedded Redis, read until it prints its curl commands."""

    def __init__(self, tmp_path: Path) -> None:
        self.stderr_path = tmp_path / "demo.err"
        with self.stderr_path.open("w") as stderr:
            self.process = subprocess.Popen(streamcrew_cmd("demo", *SMALL, "--serve"), stdout=subprocess.PIPE, stderr=stderr,
                                            text=True, env=clean_env(COLUMNS="80"))  # a terminal's width
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.redis: psutil.Process | None = None
        self.folders: list[Path] = []
        self.curl_block: list[str] = []

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_serving(self, timeout: float = 90.0) -> None:
        """Read up to the last curl example (``/dead``); then note the demo's redis-server and folders."""
        deadline = time.monotonic() + timeout
        block: list[str] | None = None
        while block is None or not block or not block[-1].endswith("/dead"):
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no curl commands within {timeout}s:\n{self.stderr_path.read_text()[-3000:]}") from None
            if block is not None:
                block.append(line)
            elif "the gateway is still running" in line:
                block = []
        self.curl_block = block
        found = [c for c in psutil.Process(self.process.pid).children() if c.name().startswith("redis-server")]
        assert len(found) == 1, found
        self.redis = found[0]
        self.folders = [Path(self.redis.cwd())]  # --dir: redis-server works in its folder (its title hides the arguments)
        logs = re.search(r"logs in (\S+)", one_line(self.stderr_path.read_text()))
        assert logs, self.stderr_path.read_text()
        self.folders.append(Path(logs.group(1)))
        assert all(f.is_dir() for f in self.folders)

    def close(self) -> None:
        """Ctrl-C, which stops the demo cleanly on the old code too; then whatever it still left behind goes."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.redis is not None and self.redis.is_running():
            self.redis.kill()
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedDemo]:
    demo = ServedDemo(tmp_path)
    try:
        demo.wait_serving()
        yield demo
    finally:
        demo.close()


def test_serve_prints_curl_commands_that_paste(served: ServedDemo) -> None:
    # Given the demo serving its gateway, printed to an 80-column console
    block = served.curl_block
    # When its lines are pasted into a shell (a trailing \ joins a line to the next)
    commands = "\n".join(block).replace("\\\n", " ").splitlines()
    # Then each is one whole curl command, the POST with JSON the gateway accepts
    assert len(commands) == 5 and all(c.startswith("curl ") for c in commands), block
    post = next(shlex.split(c) for c in commands if " -X POST " in c)
    assert json.loads(post[post.index("-d") + 1])["agent"] == "support"
    if shutil.which("curl"):
        for command in commands:
            answer = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
            assert answer.returncode == 0, (command, answer.stderr)
            json.loads(answer.stdout)
        answered = subprocess.run(["bash", "-c", commands[1] + " -w ' %{http_code}'"], capture_output=True, text=True, timeout=30)
        assert answered.stdout.endswith(" 202") and "job_id" in answered.stdout, answered.stdout


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_terminated_demo_stops_its_redis_and_removes_its_folders(served: ServedDemo, signum: signal.Signals) -> None:
    # Given the demo serving its gateway on its embedded Redis
    redis = served.redis
    assert redis is not None
    # When a supervisor (SIGTERM) or a closed terminal (SIGHUP) ends it
    served.process.send_signal(signum)
    code = served.process.wait(60)
    # Then its Redis server is stopped and its folders removed, and it ended as after Ctrl-C in --serve (exit 0)
    assert not redis.is_running(), f"redis-server {redis.pid} outlived the demo"
    assert [f for f in served.folders if f.exists()] == []
    assert code == 0, served.stderr_path.read_text()[-3000:]
