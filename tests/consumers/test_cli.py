"""The operator CLI end to end: submit --wait, stats --json, dead list/replay/purge, bad input."""

import asyncio
import json
import subprocess
import time

import pytest
import redis as sync_redis

from consumers.processes import streamcrew_cmd
from streams.keys import Keys
from tests.severed import severed_after


def cli(redis_url: str | None, prefix: str, *args: str, timeout: float = 60, env: dict[str, str] | None = None,
        answer: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process; ``answer``: what its stdin says to a question (None: no stdin at all)."""
    env_args = [*(["--redis-url", redis_url] if redis_url else []), "--prefix", prefix]
    import os
    return subprocess.run(streamcrew_cmd(*args, *env_args), capture_output=True, text=True, timeout=timeout, input=answer,
                          env={**os.environ, "STREAMCREW_RETRY_BACKOFF_S": "0.05", **(env or {})})


def test_submit_wait_prints_the_result(redis_url: str, prefix: str, workers) -> None:
    workers.start()
    done = cli(redis_url, prefix, "submit", "echo", "--data", '{"q": 1}', "--priority", "8", "--id", "cli-1", "--wait", "--timeout", "20")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["id"], result["status"], result["result"]) == ("cli-1", "completed", {"echo": {"q": 1}})
    again = cli(redis_url, prefix, "submit", "echo", "--data", "{}", "--id", "cli-1")
    assert json.loads(again.stdout) == {"job_id": "cli-1", "status": "completed", "created": False}


def test_failed_job_exit_code_and_dead_letter_commands(redis_url: str, prefix: str, workers) -> None:
    workers.start()
    done = cli(redis_url, prefix, "submit", "echo", "--data", '{"fail_first": 3}', "--id", "doomed", "--max-attempts", "2", "--wait", "--timeout", "20")
    assert done.returncode == 1
    assert json.loads(done.stdout)["status"] == "failed"
    listed = cli(redis_url, prefix, "dead", "list", "--json")
    (letter,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (letter["id"], letter["reason"]) == ("doomed", "exhausted")
    table = cli(redis_url, prefix, "dead", "list", env={"COLUMNS": "80"})  # a pipe, 80 columns: the IDs stay whole
    assert letter["entry_id"] in table.stdout and "doomed" in table.stdout, table.stdout
    replayed = cli(redis_url, prefix, "dead", "replay", letter["entry_id"])
    assert json.loads(replayed.stdout) == {"replayed": ["doomed"], "skipped": []}
    purge = cli(redis_url, prefix, "dead", "purge", "--yes")
    assert purge.returncode == 0


async def test_stats_json_counts_lanes_and_dead_letters(redis_url: str, prefix: str, redis, keys: Keys, producer) -> None:
    await producer.publish("echo", {}, priority="low")
    await producer.publish("echo", {}, priority="low")
    await redis.xadd(keys.dead, {"id": "x", "reason": "invalid", "error": "e", "source_stream": keys.lane("low"), "source_id": "1-0", "attempts": "0", "dead_at": "1"})
    done = cli(redis_url, prefix, "stats", "--json")
    figures = json.loads(done.stdout)
    assert figures["lanes"]["low"]["length"] == 2
    assert figures["lanes"]["low"]["pending"] == 0
    assert figures["dead_letters"] == 1


async def test_stats_reports_lag_on_redis7(redis_url: str, prefix: str, producer, needs_redis7) -> None:
    for _ in range(3):
        await producer.publish("echo", {}, priority="high")
    figures = json.loads(cli(redis_url, prefix, "stats", "--json").stdout)
    assert figures["lanes"]["high"]["lag"] == 3


async def test_stats_says_unknown_for_a_lag_redis_cannot_tell(redis_url: str, prefix: str, redis, keys: Keys) -> None:
    # Given a lane whose group read its first entry, and an undelivered entry then deleted (XINFO GROUPS lag nil)
    lane = keys.lane("high")
    await redis.xgroup_create(lane, "workers", id="0", mkstream=True)
    ids = [await redis.xadd(lane, {"agent": "echo", "data": "{}"}) for _ in range(3)]
    await redis.xreadgroup("workers", "w1", {lane: ">"}, count=1)
    await redis.xdel(lane, ids[1])
    # When stats runs: the JSON says null, the table "unknown" (a "-" stays for a lane with nothing in it)
    assert json.loads(cli(redis_url, prefix, "stats", "--json").stdout)["lanes"]["high"]["lag"] is None
    table = cli(redis_url, prefix, "stats", env={"COLUMNS": "200"}).stdout
    high = next(line for line in table.splitlines() if " high " in line)
    assert "unknown" in high, table
    low = next(line for line in table.splitlines() if " low " in line)
    assert "unknown" not in low, table


@pytest.mark.parametrize(("args", "message"), [
    (("submit", "echo", "--data", "[1]"), "must be a JSON object"),
    (("submit", "echo", "--data", "{bad"), "not JSON"),
    (("submit", "echo", "--priority", "12"), "0-10"),
    (("submit", "echo", "--timeout-s", "inf"), "invalid timeout_s: Input should be a finite number"),
    (("submit", "echo", "--timeout-s", "nan"), "invalid timeout_s: Input should be a finite number"),
    (("submit", "echo", "--timeout-s", "86401"), "invalid timeout_s: Input should be less than or equal to 86400"),
    (("submit", "echo", "--max-attempts", "1001"), "invalid max_attempts: Input should be less than or equal to 1000"),
    (("dead", "replay"), "--all"),
    (("dead", "list", "--count", "0"), "'--count'"),
    (("dead", "list", "--count", "-1"), "'--count'"),
    (("webhooks", "dead", "list", "--count", "0"), "'--count'"),
    (("dead", "replay", "--all", "--reason", "foo"), "--reason 'foo' is not a dead-letter reason; use one of invalid, rejected, exhausted, expired, too_large, unencodable, step_failed, malformed"),
    (("dead", "purge", "--yes", "--reason", "foo"), "--reason 'foo' is not a dead-letter reason"),
    (("worker", "--log-level", "verbose"), "invalid setting log_level: 'verbose' is not one of debug, info, warning, error, critical"),
    (("notifier", "--log-level", "loud"), "invalid setting log_level: 'loud'"),
])
def test_bad_input_is_a_clear_error(redis_url: str, prefix: str, args: tuple[str, ...], message: str) -> None:
    done = cli(redis_url, prefix, *args)
    assert done.returncode == 2, done.stderr
    assert message in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr


async def test_an_unknown_reason_leaves_the_dead_letters_alone(redis_url: str, prefix: str, redis, keys: Keys) -> None:
    # Given one dead letter
    await redis.xadd(keys.dead, {"id": "d0", "agent": "echo", "reason": "exhausted", "error": "e", "source_stream": keys.lane("low"),
                                 "source_id": "1-0", "attempts": "1", "dead_at": "1", "request": json.dumps({"agent": "echo", "data": "{}"})})
    # When replay and purge are given a reason no dead letter can carry
    replayed = cli(redis_url, prefix, "dead", "replay", "--all", "--reason", "exhausted ")
    purged = cli(redis_url, prefix, "dead", "purge", "--yes", "--reason", "Exhausted")
    # Then both are usage errors, not a quiet success, and the dead letter is still there
    assert (replayed.returncode, purged.returncode) == (2, 2), replayed.stderr + purged.stderr
    assert replayed.stdout == purged.stdout == ""
    assert await redis.xlen(keys.dead) == 1


async def test_step_failed_is_a_reason_purge_accepts(redis_url: str, prefix: str, redis, keys: Keys) -> None:
    # Given a failed workflow's dead letter (workflow.lua gives it reason step_failed) beside a job's
    for i, reason in enumerate(["step_failed", "exhausted"]):
        await redis.xadd(keys.dead, {"id": f"d{i}", "agent": "workflow", "reason": reason, "error": "e", "source_stream": keys.lane("low"),
                                     "source_id": f"{i + 1}-0", "attempts": "1", "dead_at": "1", "request": "{}"})
    # When the step_failed ones are purged
    done = cli(redis_url, prefix, "dead", "purge", "--yes", "--reason", "step_failed")
    # Then that one went, and the other stayed
    assert json.loads(done.stdout) == {"purged": 1}, done.stderr
    assert await redis.xlen(keys.dead) == 1


async def test_malformed_is_a_reason_purge_and_replay_accept(redis_url: str, prefix: str, redis, keys: Keys) -> None:
    # Given a hand-made letter (no source_stream, source_id, dead_at: listed as malformed) that says it is exhausted,
    # one of another reason, and a well-formed exhausted one
    await redis.xadd(keys.dead, {"id": "hand", "agent": "echo", "reason": "exhausted", "error": "e"})
    await redis.xadd(keys.dead, {"id": "odd", "reason": "bogus"})
    await redis.xadd(keys.dead, {"id": "d0", "agent": "echo", "reason": "exhausted", "error": "e", "source_stream": keys.lane("low"),
                                 "source_id": "1-0", "attempts": "1", "dead_at": "1", "request": "{}"})
    listed = [json.loads(line) for line in cli(redis_url, prefix, "dead", "list", "--json").stdout.splitlines()]
    assert [(d["id"], d["reason"]) for d in listed] == [("hand", "malformed"), ("odd", "malformed"), ("d0", "exhausted")]
    # When replay --all takes the malformed ones: each is skipped as unreplayable (exit 1), not refused as a usage error
    replayed = cli(redis_url, prefix, "dead", "replay", "--all", "--reason", "malformed")
    assert replayed.returncode == 1, replayed.stderr
    answer = json.loads(replayed.stdout)
    assert answer["replayed"] == [] and len(answer["skipped"]) == 2 and all("cannot be replayed" in s for s in answer["skipped"]), answer
    # And purge takes them by the reason they are listed with, whatever their own field says
    purged = cli(redis_url, prefix, "dead", "purge", "--yes", "--reason", "malformed")
    assert (purged.returncode, json.loads(purged.stdout)) == (0, {"purged": 2}), purged.stderr
    assert [f["id"] for _, f in await redis.xrange(keys.dead)] == ["d0"]


@pytest.mark.parametrize("answer", ["n\n", ""], ids=["no", "stdin-closed"])
@pytest.mark.parametrize("command", [["dead", "purge"], ["webhooks", "dead", "purge"]], ids=["dead", "webhooks-dead"])
async def test_declining_a_purge_deletes_nothing_and_exits_1(redis_url: str, prefix: str, redis, keys: Keys,
                                                            command: list[str], answer: str) -> None:
    # Given a dead letter and a webhook dead letter
    await redis.xadd(keys.dead, {"id": "d0", "agent": "echo", "reason": "exhausted", "error": "e", "source_stream": keys.lane("low"),
                                 "source_id": "1-0", "attempts": "1", "dead_at": "1", "request": "{}"})
    await redis.xadd(keys.webhooks_dead, {"id": "d0", "url": "https://example.com/hook", "attempts": "8", "event": "{}"})
    # When purge asks for confirmation and is answered no (or gets no answer: no terminal, stdin closed)
    done = cli(redis_url, prefix, *command, answer=answer)
    # Then nothing was done, as asked: exit 1 (nothing purged, as click's Abort), not 2 (the command was well formed)
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "nothing deleted" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.startswith("Delete every") and "purged" not in done.stdout, done.stdout
    assert (await redis.xlen(keys.dead), await redis.xlen(keys.webhooks_dead)) == (1, 1)


@pytest.mark.parametrize("named", [True, False], ids=["entry-ids", "all"])
async def test_redis_going_away_mid_replay_is_exit_4_and_says_what_was_replayed(redis_url: str, prefix: str, redis, keys: Keys,
                                                                              named: bool) -> None:
    # Given three dead letters
    entries = [await redis.xadd(keys.dead, {"id": f"d{i}", "agent": "echo", "reason": "exhausted", "error": "e", "source_stream": keys.lane("low"),
                                            "source_id": f"{i + 1}-0", "attempts": "1", "dead_at": "1", "request": json.dumps({"agent": "echo", "data": "{}"})})
               for i in range(3)]
    # When `dead replay` reaches Redis through a link that goes away for good once the first replay is answered
    async with severed_after(redis_url, scripts=1) as link:
        done = await asyncio.to_thread(cli, link.url, prefix, "dead", "replay", *(entries if named else ["--all"]))
        assert link.cut.is_set(), done.stderr
    # Then it is an outage (exit 4), not two skipped dead letters (exit 1), and it says which went back and which did not
    assert done.returncode == 4, (done.returncode, done.stdout, done.stderr)
    report = json.loads(done.stdout)
    assert (report["replayed"], report["skipped"]) == (["d0"], []), report
    line = " ".join(done.stderr.split())
    assert "Redis unavailable" in line and "replayed 1 (job ids: d0)" in line and "Traceback" not in done.stderr, done.stderr
    if named:
        assert report["not_replayed"] == entries[1:] and f"not replayed: {entries[1]}, {entries[2]}" in line, (report, line)
    # And Redis agrees: d0 is back in its lane, the other two are still dead letters
    assert [fields["id"] for _, fields in await redis.xrange(keys.dead)] == ["d1", "d2"]
    assert [fields["id"] for _, fields in await redis.xrange(keys.lane("low"))] == ["d0"]


@pytest.mark.parametrize("named", [True, False], ids=["entry-ids", "all"])
async def test_redis_going_away_mid_webhook_replay_is_exit_4_and_says_what_was_replayed(redis_url: str, prefix: str, redis,
                                                                                      keys: Keys, named: bool) -> None:
    # Given three webhook dead letters
    entries = [await redis.xadd(keys.webhooks_dead, {"id": f"w{i}", "url": "https://example.com/hook", "attempts": "8", "event": "{}"})
               for i in range(3)]
    # When `webhooks dead replay` reaches Redis through a link that goes away for good once the first replay is answered
    async with severed_after(redis_url, scripts=1) as link:
        done = await asyncio.to_thread(cli, link.url, prefix, "webhooks", "dead", "replay", *(entries if named else ["--all"]))
        assert link.cut.is_set(), done.stderr
    # Then it is an outage (exit 4) that still prints which went back and which did not
    assert done.returncode == 4, (done.returncode, done.stdout, done.stderr)
    report = json.loads(done.stdout)
    assert (report["replayed"], report["skipped"]) == ([entries[0]], []), report
    line = " ".join(done.stderr.split())
    assert "Redis unavailable" in line and f"replayed 1 (entries: {entries[0]})" in line and "Traceback" not in done.stderr, done.stderr
    if named:
        assert report["not_replayed"] == entries[1:] and f"not replayed: {entries[1]}, {entries[2]}" in line, (report, line)
    # And Redis agrees: the first is queued for delivery again, the other two are still dead letters
    assert [eid for eid, _ in await redis.xrange(keys.webhooks_dead)] == entries[1:]
    assert [fields["id"] for _, fields in await redis.xrange(keys.webhooks_due)] == ["w0"]


@pytest.mark.parametrize(("command", "url", "problem"), [
    ("stats", "http://127.0.0.1:1/0", "it must start with one of redis://, rediss://, unix://"),
    ("worker", "http://operator:s3cretPW@127.0.0.1:1/0", "it must start with one of redis://, rediss://, unix://"),
    ("stats", "redis://127.0.0.1:notaport/0", "its port is not a number from 0 to 65535"),
    ("notifier", "redis://:s3cretPW@127.0.0.1:70000/0", "its port is not a number from 0 to 65535"),
    ("watch", "redis://:s3cret/PW@127.0.0.1:1/0", "its port is not a number from 0 to 65535"),  # a '/' ends the host: 's3cret' reads as the port
    ("submit", "redis://:s3cretPW@127.0.0.1:1/0?socket_timeout=soon", "Invalid value for 'socket_timeout' in connection URL."),
    ("stats", "redis://:s3cretPW@127.0.0.1:1/0?bogus=1", "it has an option redis-py does not take ('bogus')"),  # was a TypeError traceback
])
def test_a_bad_redis_url_is_one_line_without_its_password(prefix: str, command: str, url: str, problem: str) -> None:
    # Given STREAMCREW_REDIS_URL that redis-py would refuse
    done = cli(None, prefix, *(["submit", "echo"] if command == "submit" else [command]), env={"STREAMCREW_REDIS_URL": url})
    # Then one line names the setting and the problem, with the usage exit code, and shows no password
    assert done.returncode == 2, done.stderr
    line = " ".join(done.stderr.split()).replace("`", "'")  # redis-py before 6 quotes the URL's option with backticks
    assert line == f"invalid setting redis_url: {problem}"
    assert "s3cret" not in done.stderr + done.stdout


def test_a_model_level_settings_error_names_no_empty_setting(redis_url: str, prefix: str) -> None:
    # Given one partition, and a worker asked to read partition 3
    done = cli(redis_url, prefix, "worker", "--partitions", "3", env={"STREAMCREW_PARTITIONS": "1"})
    # Then the error is the validator's message, without an empty setting name or pydantic's "Value error, "
    assert done.returncode == 2, done.stderr
    line = " ".join(done.stderr.split())
    assert line.startswith("invalid settings: ") and "'3'" in line, line
    assert "setting :" not in line and "Value error" not in line and "Traceback" not in line


@pytest.mark.parametrize("command", [["stats"], ["job", "some-id"], ["dead", "list"]])
def test_unreachable_redis_is_one_clear_line(prefix: str, command: list[str]) -> None:
    # a command answers now or says why; the long-running ones wait for Redis (tests/consumers/test_redis_at_start.py)
    done = cli("redis://127.0.0.1:1/0", prefix, *command)
    assert done.returncode == 4, done.stderr
    assert "cannot reach Redis" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["stats"], ["job", "some-id"], ["dead", "list"], ["submit", "echo", "--data", "{}"]])
def test_a_redis_that_hangs_ends_a_command_in_seconds_with_one_clear_line(own_redis, prefix: str, command: list[str]) -> None:
    """A paused host or VM: the kernel accepts the connection, nothing answers. redis-py retries a command's connect and
    the command itself, each at the socket timeout: a command waited 137 s before (3 x 3 tries x 15 s)."""
    import os
    import signal

    from streams.connection import ONE_SHOT_TIMEOUT_S

    assert own_redis.process is not None
    os.kill(own_redis.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        done = cli(own_redis.url, prefix, *command, timeout=120)
        took = time.monotonic() - started
    finally:
        os.kill(own_redis.process.pid, signal.SIGCONT)
    assert done.returncode == 4, done.stderr
    assert "Redis unavailable (TimeoutError" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert took < 4 * ONE_SHOT_TIMEOUT_S, f"the command waited {took:.1f} s for a Redis that hangs"


def test_submit_sets_deadline_and_attempt_timeout(redis_url: str, prefix: str, workers) -> None:
    workers.start("--agents", "echo")
    late = cli(redis_url, prefix, "submit", "echo", "--id", "cli-late", "--deadline", "1", "--wait", "--timeout", "20")
    assert late.returncode == 1 and json.loads(late.stdout)["status"] == "expired", late.stderr
    slow = cli(redis_url, prefix, "submit", "echo", "--data", '{"sleep_s": 5}', "--id", "cli-slow", "--timeout-s", "0.2",
               "--max-attempts", "1", "--wait", "--timeout", "20")
    assert slow.returncode == 1 and "timed out after 0.2s" in json.loads(slow.stdout)["error"], slow.stderr


async def test_dead_purge_and_replay_by_reason(redis_url: str, prefix: str, redis, keys: Keys) -> None:
    for i, reason in enumerate(["invalid", "expired", "invalid"]):
        await redis.xadd(keys.dead, {"id": f"d{i}", "agent": "echo", "reason": reason, "error": "e", "source_stream": keys.lane("low"),
                                     "source_id": f"{i + 1}-0", "attempts": "1", "dead_at": "1", "request": json.dumps({"agent": "echo", "data": "{}"})})
    purged = cli(redis_url, prefix, "dead", "purge", "--yes", "--reason", "invalid")
    assert json.loads(purged.stdout) == {"purged": 2}, purged.stderr
    replayed = cli(redis_url, prefix, "dead", "replay", "--all", "--reason", "expired")
    assert json.loads(replayed.stdout) == {"replayed": ["d1"], "skipped": []}, replayed.stderr
    assert await redis.xlen(keys.dead) == 0


@pytest.mark.parametrize("status", ["queued", "running", "retrying"])
async def test_dead_replay_refuses_a_live_job(redis_url: str, prefix: str, redis, keys: Keys, status: str) -> None:
    # Given a dead letter of job "reused" whose id names a live job again
    await redis.xadd(keys.dead, {"id": "reused", "agent": "echo", "reason": "exhausted", "error": "old boom",
                                 "source_stream": keys.lane("low"), "source_id": "1-0", "attempts": "3",
                                 "dead_at": "1700000000000", "request": '{"agent": "echo", "data": "{}"}'})
    await redis.hset(keys.job("reused"), mapping={"status": status, "agent": "echo", "attempts": "1", "source": "normal/5-0"})
    # When it is replayed from the CLI
    done = cli(redis_url, prefix, "dead", "replay", "--all")
    # Then it is skipped with the reason, and the live job is untouched
    assert done.returncode == 1
    answer = json.loads(done.stdout)
    assert answer["replayed"] == [] and len(answer["skipped"]) == 1 and f"is {status} again" in answer["skipped"][0], answer
    assert f"is {status} again" in done.stderr
    assert await redis.hgetall(keys.job("reused")) == {"status": status, "agent": "echo", "attempts": "1", "source": "normal/5-0"}
    assert await redis.xlen(keys.dead) == 1


@pytest.mark.parametrize(("job_id", "words"), [("commande-é", "ASCII letters, digits"), ("1764580000000-0", "reserved")])
def test_submit_refuses_an_id_outside_the_alphabet(redis_url: str, prefix: str, job_id: str, words: str) -> None:
    done = cli(redis_url, prefix, "submit", "echo", "--id", job_id)
    assert done.returncode == 2, done.stderr
    assert words in " ".join(done.stderr.split())


def test_a_structured_variable_that_is_not_json_is_one_line(prefix: str) -> None:
    # Given STREAMCREW_LLM_PRICES (JSON) set to a file name, as one might confuse it with STREAMCREW_LLM_PRICE_FILE
    done = cli(None, prefix, "worker", "--agents", "echo", env={"STREAMCREW_LLM_PRICES": "prices-secret-name.json"})
    # Then the worker refuses to start in one line naming the variable, not its value, and no traceback
    assert done.returncode == 2, done.stderr
    assert " ".join(done.stderr.split()) == "invalid setting STREAMCREW_LLM_PRICES: not valid JSON", done.stderr


async def test_stats_and_monitor_partitions_show_only_those(redis_url: str, prefix: str, redis, keys: Keys) -> None:
    # Given 4 partitions whose normal lanes hold 1, 2, 3 and 4 entries and whose dead streams 1 letter each, and a
    # consumer group missing in partitions 1 and 3's normal lane
    env = {"STREAMCREW_PARTITIONS": "4", "COLUMNS": "200"}
    every = [keys.in_partition(p) for p in range(4)]
    for p, k in enumerate(every):
        for _ in range(p + 1):
            await redis.xadd(k.lane("normal"), {"agent": "echo", "data": "{}"})
        if p % 2 == 0:
            await redis.xgroup_create(k.lane("normal"), "workers", id="$")
        await redis.xadd(k.dead, {"id": f"d{p}", "agent": "echo", "reason": "exhausted", "error": "e", "source_stream": k.lane("low"),
                                  "source_id": "1-0", "attempts": "1", "dead_at": "1", "request": "{}"})
    # When stats is narrowed to partitions 1 and 3 (a list, as a worker's --partitions takes)
    narrowed = cli(redis_url, prefix, "stats", "--json", "--partitions", "1,3", env=env)
    # Then its figures are those two partitions' alone, each one's listed and named, the missing groups by partition
    assert narrowed.returncode == 0, narrowed.stderr
    figures = json.loads(narrowed.stdout)
    assert (figures["lanes"]["normal"]["length"], figures["dead_letters"]) == (2 + 4, 2)
    assert figures["shown_partitions"] == [1, 3] and len(figures["partitions"]) == 2
    assert [each["lanes"]["normal"]["length"] for each in figures["partitions"]] == [2, 4]
    assert figures["lanes"]["normal"]["group_missing_partitions"] == [1, 3]
    assert figures["lanes"]["normal"]["lag"] == 6  # a lane without its group: every entry waits
    assert figures["lanes"]["normal"]["stream"] == f"{prefix}:{{1,3}}:requests:normal"  # the partitions summed, not {*}
    # And a range narrows alike, every partition stays the default, and the table says which it shows
    assert json.loads(cli(redis_url, prefix, "stats", "--json", "--partitions", "2-3", env=env).stdout)["lanes"]["normal"]["length"] == 3 + 4
    whole = json.loads(cli(redis_url, prefix, "stats", "--json", env=env).stdout)
    assert (whole["lanes"]["normal"]["length"], whole["dead_letters"], len(whole["partitions"])) == (10, 4, 4) and "shown_partitions" not in whole
    assert whole["results"]["stream"] == f"{prefix}:{{*}}:results"
    every = json.loads(cli(redis_url, prefix, "stats", "--json", "--partitions", "0-3", env=env).stdout)
    assert every["results"]["stream"] == f"{prefix}:{{*}}:results"  # every partition, listed: {*} as unlisted
    table = cli(redis_url, prefix, "stats", "--partitions", "1,3", env=env).stdout
    assert f"prefix {prefix}, partitions 1, 3 of 4" in table, table
    # And the monitor shows the same partitions' figures (a pipe: plain lines)
    report = cli(redis_url, prefix, "monitor", "--once", "--partitions", "1,3", env=env)
    assert report.returncode == 0, report.stderr
    assert "Queue Depth: 6 (high 0, normal 6, low 0)" in report.stdout and "Dead Letters: 2" in report.stdout, report.stdout
    assert f"prefix {prefix}, partitions 1, 3 of 4" in report.stdout, report.stdout


@pytest.mark.parametrize("command", [["stats"], ["monitor", "--once"]])
@pytest.mark.parametrize(("spec", "line"), [
    ("4", "invalid settings: partition range '4' is outside 0-3"),
    ("3-1", "invalid settings: partition range '3-1' runs backwards; write 1-3"),
    ("x", "invalid settings: bad partition range 'x'; use e.g. 0-3,5"),
])
def test_stats_and_monitor_refuse_partitions_as_a_worker_does(redis_url: str, prefix: str, command: list[str], spec: str, line: str) -> None:
    env = {"STREAMCREW_PARTITIONS": "4"}
    # Given the line a worker prints for a --partitions it cannot serve
    worker = cli(redis_url, prefix, "worker", "--partitions", spec, "--metrics-port", "0", env=env)
    assert (worker.returncode, worker.stderr.strip()) == (2, line), worker.stderr
    # Then stats and monitor refuse it with the same line and exit 2
    done = cli(redis_url, prefix, *command, "--partitions", spec, env=env)
    assert (done.returncode, done.stderr.strip(), done.stdout) == (2, line, ""), done.stderr


@pytest.mark.parametrize("partitions", ["1", "4"])
def test_job_prints_a_record_by_its_id_alone(redis_url: str, prefix: str, workers, partitions: str) -> None:
    # Given a job with an id and an id-less one, queued with no worker running (in 4 partitions: wherever they landed)
    env = {"STREAMCREW_PARTITIONS": partitions}
    named = json.loads(cli(redis_url, prefix, "submit", "echo", "--data", '{"q": 1}', "--id", "look-me-up", "--tenant", "acme", env=env).stdout)
    idless = json.loads(cli(redis_url, prefix, "submit", "echo", "--data", '{"q": 2}', env=env).stdout)["job_id"]
    # When each is looked up by its id
    queued = cli(redis_url, prefix, "job", "look-me-up", env=env)
    # Then its record prints as one JSON object, as GET /jobs/{id} shows it
    assert queued.returncode == 0, queued.stderr
    record = json.loads(queued.stdout)
    assert (record["job_id"], record["status"], record["agent"], record["tenant"]) == ("look-me-up", "queued", "echo", "acme")
    assert named["created"] and "source" not in record and "base" not in record  # internal fields stay internal
    assert json.loads(cli(redis_url, prefix, "job", idless, env=env).stdout)["job_id"] == idless
    # And once a worker ran them, with how they ended
    workers.start(env=env)
    done = cli(redis_url, prefix, "submit", "echo", "--data", '{"q": 3}', "--id", "look-me-up-2", "--wait", "--timeout", "20", env=env)
    assert done.returncode == 0, done.stderr
    ended = json.loads(cli(redis_url, prefix, "job", "look-me-up-2", env=env).stdout)
    assert (ended["status"], ended["result"], ended["attempts"]) == ("completed", {"echo": {"q": 3}}, 1)


def test_job_of_an_unknown_id_is_one_line_and_exit_1(redis_url: str, prefix: str) -> None:
    done = cli(redis_url, prefix, "job", "no-such\x1b[31mjob")
    assert done.returncode == 1
    assert done.stdout == ""
    assert " ".join(done.stderr.split()) == f"no job 'no-such\\x1b[31mjob' under prefix '{prefix}' (unknown, or its record expired)"


@pytest.mark.parametrize("command", [["dead", "replay"], ["webhooks", "dead", "replay"]])
@pytest.mark.parametrize("entry", ["ORD-12345", "99999999999999999999999-0", "[/x]"])  # [/x]: rich markup, printed as given
def test_replaying_a_name_that_is_no_entry_id_says_so(redis_url: str, prefix: str, command: list[str], entry: str) -> None:
    # Given a name that is not a dead letter's entry_id (a job id, say), passed to replay
    done = cli(redis_url, prefix, *command, entry)
    # Then it is skipped with a reason that names it, exit 1, no traceback (Redis' "Invalid stream ID" said neither)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    (skipped,) = json.loads(done.stdout)["skipped"]
    assert entry in skipped and "not an entry_id" in skipped, skipped


def test_a_database_the_server_does_not_have_is_one_line(redis_url: str, prefix: str) -> None:
    # Given a URL naming database 99 of a Redis that has 16
    url = redis_url.rsplit("/", 1)[0] + "/99"
    for command in (["stats"], ["job", "x"], ["worker", "--agents", "echo", "--metrics-port", "0"]):
        done = cli(url, prefix, *command, timeout=30)
        # Then one line says so, with the usage exit code, and no traceback
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert " ".join(done.stderr.split()).startswith("invalid setting redis_url: Redis refused its database number"), done.stderr


@pytest.mark.parametrize(("url", "problem"), [
    ("redis://:s3cretPW@:1/0", "it names no host"),  # port 1: before the fix it went to localhost, refused, not some Redis
    ("rediss://:s3cretPW@:1", "it names no host"),
    ("redis://:1/0", "it names no host"),
    ("redis://:s3cretPW@127.0.0.1:1/zero", "its database (the path after the host) is not a database number (0, 1, ...)"),
    ("redis://:s3cretPW@127.0.0.1:1/0/1", "its database (the path after the host) is not a database number (0, 1, ...)"),
])
def test_a_url_redis_py_would_quietly_read_otherwise_is_refused(prefix: str, url: str, problem: str) -> None:
    # Given a URL with no host (redis-py would use localhost:6379) or a database that is not a number (it would use 0)
    done = cli(url, prefix, "submit", "echo")
    # Then nothing is sent anywhere: one line names the problem, without the password
    assert done.returncode == 2, done.stderr + done.stdout
    assert " ".join(done.stderr.split()) == f"invalid setting redis_url: {problem}"
    assert "s3cret" not in done.stderr + done.stdout


def test_a_data_file_that_is_not_utf8_is_one_line(redis_url: str, prefix: str, tmp_path) -> None:
    data = tmp_path / "latin1.json"
    data.write_bytes('{"name": "caf\xe9"}'.encode("latin-1"))
    done = cli(redis_url, prefix, "submit", "echo", "--data", f"@{data}")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    line = " ".join(done.stderr.split())
    assert line.startswith(f"--data @{data}: not UTF-8 text"), line


@pytest.mark.parametrize(("args", "line"), [
    (("--max-attempts", "0"), "invalid max_attempts: Input should be greater than or equal to 1"),
    (("--timeout-s", "-1"), "invalid timeout_s: Input should be greater than 0"),
    (("--deadline", "-5"), "invalid deadline: Input should be greater than or equal to 0"),
    (("--id", "[/x]"), "invalid id: job id must be 1-512 ASCII letters, digits, '_', '.', ':' or '-', got '[/x]'"),
    (("--priority", "[/x]"), "priority must be one of high, normal, low or 0-10, got '[/x]'"),  # not read as rich markup
])
def test_a_request_field_out_of_range_is_one_line(redis_url: str, prefix: str, args: tuple[str, ...], line: str) -> None:
    # pydantic's own text is four lines with a link to its site
    done = cli(redis_url, prefix, "submit", "echo", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == line, done.stderr


@pytest.mark.parametrize(("data", "line"), [
    ('{"priority": 42}', "--data: data.priority must be an integer 0-10, got 42 (it picks the lane unless --priority is given)"),
    ('{"priority": -1}', "--data: data.priority must be an integer 0-10, got -1 (it picks the lane unless --priority is given)"),
    ('{"priority": 7.5}', "--data: data.priority must be an integer 0-10, got 7.5 (it picks the lane unless --priority is given)"),
    ('{"customer_id": "C", "data": {"priority": 11}}',
     "--data: data.data.priority must be an integer 0-10, got 11 (it picks the lane unless --priority is given)"),
])
def test_submit_refuses_a_priority_in_data_out_of_range_before_queueing(redis_url: str, prefix: str, tmp_path, data: str,  # type: ignore[no-untyped-def]
                                                                        line: str) -> None:
    # Given a priority in the request's data (it picks the lane, contract §13) outside 0-10, as --data and as --data @FILE
    request = tmp_path / "request.json"
    request.write_text(data)
    for given in (data, f"@{request}"):
        # When it is submitted without --priority
        done = cli(redis_url, prefix, "submit", "echo", "--data", given)
        # Then it is refused in one line naming the field and the range, as --priority 12 is: exit 2, nothing queued
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.strip() == line, done.stderr
    with sync_redis.Redis.from_url(redis_url) as client:
        assert not list(client.scan_iter(match=f"{prefix}:*")), "the request was queued with its priority ignored"
    # And with --priority, which wins over data's, the data goes as it is (its priority is then the agent's own field)
    explicit = cli(redis_url, prefix, "submit", "echo", "--data", data, "--priority", "low")
    assert explicit.returncode == 0 and json.loads(explicit.stdout)["created"], explicit.stderr


def test_submit_takes_a_priority_in_data_that_is_no_number_as_the_agents_own(redis_url: str, prefix: str) -> None:
    # A string is no priority (contract §13: an integer 0-10 picks the lane): the job goes to normal, as POST /jobs sends it
    done = cli(redis_url, prefix, "submit", "echo", "--data", '{"priority": "urgent"}', "--id", "own-field")
    assert done.returncode == 0, done.stderr
    with sync_redis.Redis.from_url(redis_url, decode_responses=True) as client:
        assert client.hget(Keys(prefix).job("own-field"), "lane") == "normal"


def test_submit_refuses_a_webhook_that_is_no_http_url_before_queueing(redis_url: str, prefix: str) -> None:
    # Given webhooks POST /jobs answers 422 for
    for webhook in ("notaurl", "ftp://example.com/x", "/relative/hook"):
        # When submit is given one
        done = cli(redis_url, prefix, "submit", "echo", "--webhook", webhook)
        # Then it says why in one line, exit 2, and queues nothing
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.strip() == "invalid webhook: webhook must be an absolute http:// or https:// URL", done.stderr
    with sync_redis.Redis.from_url(redis_url) as client:
        assert not list(client.scan_iter(match=f"{prefix}:*")), "something was written for the refused requests"


def test_submit_refuses_an_integer_beyond_64_bits_rather_than_send_a_float(redis_url: str, prefix: str) -> None:
    # Given --data with an integer no 64-bit reader holds (orjson reads it as the float 1e+20)
    done = cli(redis_url, prefix, "submit", "echo", "--data", '{"order_id": 99999999999999999999}')
    # Then it is refused in one line, as POST /jobs answers 422, and nothing is queued
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == "--data holds an integer beyond 64 bits; send it as a string", done.stderr
    with sync_redis.Redis.from_url(redis_url) as client:
        assert not list(client.scan_iter(match=f"{prefix}:*")), "the request was queued with its number changed"


def test_counts_and_waits_below_their_range_are_usage_errors(prefix: str) -> None:
    # Given options whose values cannot mean anything (before, --count -1 ended at once with exit 0, and
    # --timeout -1 waited for nothing and reported a timeout)
    for args in (("watch", "--count", "0"), ("submit", "echo", "--wait", "--timeout", "-1")):
        # When given, against a Redis nobody listens on (a usage error comes first)
        done = cli("redis://127.0.0.1:1/0", prefix, *args)
        # Then exit 2, naming the option
        assert done.returncode == 2, (args, done.stderr)
        assert args[-2] in done.stderr, done.stderr


@pytest.mark.parametrize("wait", [False, True], ids=["no-wait", "wait"])
async def test_submit_whose_id_less_job_finds_both_names_taken_says_so_and_exits_1(redis_url: str, prefix: str, redis,
                                                                                 keys: Keys, wait: bool) -> None:
    # Given records squatting the next entry ID of the clock and its '<lane>:' form (only a raw XADD can do it;
    # POST /jobs answers 409 id_conflict for this)
    ahead = 9_999_999_999_000
    await redis.set(keys.clock, f"{ahead}-0")
    for job_id in (f"{ahead}-1", f"normal:{ahead}-1"):
        await redis.hset(keys.job(job_id), mapping={"status": "queued"})
    # When an id-less job is submitted (with --wait too: before, it waited its whole timeout on the id "")
    args = ("submit", "echo", "--data", "{}", *(("--wait", "--timeout", "30") if wait else ()))
    done = await asyncio.to_thread(cli, redis_url, prefix, *args)
    # Then it says in one line that nothing was queued, and exits 1
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no free id for this job" in done.stderr and done.stdout == "", done.stdout + done.stderr


async def test_dead_list_json_shows_a_letter_that_is_not_utf8(redis_url: str, prefix: str, redis, keys: Keys) -> None:
    # Given a hand-made dead letter with bytes that are not UTF-8, beside a good one (before: a traceback, exit 1)
    await redis.xadd(keys.dead, {b"id": b"dx\xff", b"agent": b"a\xfe", b"reason": b"invalid", b"error": b"e\xff",
                                 b"source_stream": keys.lane("normal").encode(), b"source_id": b"1-0", b"dead_at": b"1"})
    await redis.xadd(keys.dead, {"id": "good", "agent": "echo", "reason": "expired", "error": "late", "source_stream": keys.lane("normal"),
                                 "source_id": "2-0", "attempts": "1", "dead_at": "1", "request": '{"agent": "echo", "data": "{}"}'})
    done = cli(redis_url, prefix, "dead", "list", "--json")
    # Then every letter is a line of JSON, the undecodable bytes shown as U+FFFD, and the output is ASCII
    assert done.returncode == 0, done.stderr
    letters = [json.loads(line) for line in done.stdout.splitlines()]
    assert [d["id"] for d in letters] == ["dx\ufffd", "good"] and done.stdout.isascii()


async def test_watch_passes_a_result_entry_that_is_not_a_result(redis_url: str, prefix: str, redis, keys: Keys) -> None:
    # Given a hand-made entry in the results stream before two results (before: watch stopped there, exit 2)
    good = {"id": "r1", "agent": "echo", "status": "completed", "attempts": "1", "result": "{}"}
    await redis.xadd(keys.results, {**good, "id": "odd", "usage": "[1, 2]"})
    await redis.xadd(keys.results, good)
    await redis.xadd(keys.results, {**good, "id": "r2"})
    done = cli(redis_url, prefix, "watch", "--from-start", "--count", "2", timeout=30)
    # Then it says so and goes on to the next, which --count counts: two results (the hand-made entry was counted, and
    # watch stopped after one result)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == ["r1", "r2"]
    assert "is not a result event" in done.stderr


def test_a_unix_socket_url_connects(prefix: str, redis_binary: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Given a Redis listening on a unix socket only (before: redis-py refused the TCP keepalive option, a traceback)
    sock = tmp_path / "r.sock"
    server = subprocess.Popen([redis_binary, "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # no event to await: the socket file appears when redis-server listens
        assert sock.exists(), f"redis-server made no socket in 10 s (exit code {server.poll()})"
        done = cli(f"unix://{sock}", prefix, "stats", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["dead_letters"] == 0
    finally:
        server.kill()
        server.wait(timeout=10)


async def test_stats_json_shows_a_consumer_name_that_is_not_utf8(redis_url: str, prefix: str, redis, keys: Keys) -> None:
    # Given a consumer made by hand with a name that is not UTF-8 (XGROUP CREATECONSUMER takes any bytes)
    await redis.xgroup_create(keys.lane("normal"), "workers", id="0", mkstream=True)
    await redis.execute_command("XGROUP", "CREATECONSUMER", keys.lane("normal"), "workers", b"c\xff")
    done = cli(redis_url, prefix, "stats", "--json")
    # Then stats --json is strict JSON with the bytes shown as U+FFFD (before: a lone surrogate escape, '\\udcff')
    assert done.returncode == 0, done.stderr
    assert "\\udcff" not in done.stdout
    assert [c["name"] for c in json.loads(done.stdout)["lanes"]["normal"]["consumers"]] == ["c\ufffd"]


def test_job_of_a_record_without_a_known_status_is_no_job(redis_url: str, prefix: str) -> None:
    # Given records a raw writer stored with HSET: one without a status, one with a status no script writes
    client = sync_redis.Redis.from_url(redis_url)
    try:
        client.hset(Keys(prefix).job("nostatus"), mapping={"agent": "echo", "attempts": "1", "tenant": "globex"})
        client.hset(Keys(prefix).job("oddstatus"), mapping={"status": "paused", "agent": "echo"})
    finally:
        client.close()
    for job_id in ("nostatus", "oddstatus"):
        # When each is looked up
        done = cli(redis_url, prefix, "job", job_id)
        # Then it is no job, as GET /jobs/{id} answers 404: one line and exit 1, no traceback
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert done.stdout == ""
        assert " ".join(done.stderr.split()) == f"no job '{job_id}' under prefix '{prefix}' (unknown, or its record expired)"


def test_submit_reads_a_data_file_up_to_a_bound(redis_url: str, prefix: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Given a 1,000-byte request limit, an indented data file larger than that whose compact JSON fits, and a file
    # over 8 times the limit (a file of gigabytes, or @/dev/zero, was read whole before anything was checked)
    indented = tmp_path / "indented.json"
    indented.write_text('{\n' + " " * 2000 + '"n": 1\n}')
    big = tmp_path / "big.json"
    big.write_text('{"blob": "' + "x" * 8000 + '"}')
    env = {"STREAMCREW_MAX_REQUEST_BYTES": "1000"}
    # When each is submitted
    fits = cli(redis_url, prefix, "submit", "echo", "--data", f"@{indented}", env=env)
    refused = cli(redis_url, prefix, "submit", "echo", "--data", f"@{big}", env=env)
    # Then the indented one is queued, and the big one refused before it is parsed, naming the bound; nothing else queued
    assert fits.returncode == 0 and json.loads(fits.stdout)["created"], fits.stderr
    assert refused.returncode == 2, refused.stderr
    assert "over 8,000 bytes (8 times the largest request, STREAMCREW_MAX_REQUEST_BYTES)" in refused.stderr, refused.stderr
    assert sync_redis.Redis.from_url(redis_url).xlen(f"{prefix}:requests:normal") == 1
