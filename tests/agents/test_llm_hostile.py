"""Hostile LLM endpoints on loopback against the real LLMClient (issue 10 defects 3 and 8, issue 15; answer size, key runs, URL query, malformed 200s)."""

from __future__ import annotations

import asyncio
import gc
import gzip
import logging
import time
import tracemalloc
from collections.abc import Iterator
from typing import TypeVar

import orjson
import pytest
from prometheus_client import REGISTRY

from agents.llm import LLMClient, LLMRequestError, LLMSettings, LLMUnavailable
from agents.usage import UsageLedger
from tests.hostile import Start, response, started_peers

E = TypeVar("E", bound=BaseException)

SECRET = "sk-hostile-0123456789abcdef"
HELLO = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]  # a request's tools, offered
def completion(text: str) -> bytes:
    return orjson.dumps({"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1}})


def ok(text: str) -> bytes:
    return response(200, completion(text), headers="content-type: application/json\r\n")


peer = pytest.fixture(started_peers, name="peer")


def client_for(url: str, **overrides: object) -> LLMClient:
    values: dict[str, object] = {"base_url": url + "/v1", "api_keys": SECRET, "model": "hostile-model",
                                 "backoff_s": 0.01, "max_backoff_s": 0.3, "timeout_s": 3.0, "retry_budget_s": 5.0}
    values.update(overrides)
    return LLMClient(LLMSettings(**values))  # type: ignore[arg-type]


async def failed_call(client: LLMClient, error: type[E]) -> pytest.ExceptionInfo[E]:
    """One call that must fail with ``error``; the client is closed either way."""
    try:
        with pytest.raises(error) as caught:
            await client.chat(HELLO)
    finally:
        await client.aclose()
    return caught


async def test_an_early_hints_response_never_shifts_answers_between_calls(peer: Start) -> None:
    # Given an endpoint that sends "103 Early Hints" before the first call's real answer
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        hints = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n" if n == 1 else b""
        writer.write(hints + ok(f"answer-{n}"))
        await writer.drain()
        return True

    p = await peer(answer)
    client = client_for(p.url)
    try:
        # When three calls are made one after the other
        results = [await client.chat(HELLO) for _ in range(3)]
    finally:
        await client.aclose()
    # Then each call gets its own answer
    assert [r.content for r in results] == ["answer-1", "answer-2", "answer-3"]


async def test_an_answer_sent_twice_is_never_the_next_calls_answer(peer: Start) -> None:
    # Given an endpoint (or a proxy) that answers each request twice, the copy a moment later on the idle connection
    copies_sent: list[asyncio.Event] = []

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(ok(f"answer-{n}"))
        await writer.drain()

        async def copy() -> None:
            await asyncio.sleep(0.05)
            writer.write(ok(f"stray copy of answer-{n}"))
            copies_sent[n - 1].set()

        copies_sent.append(asyncio.Event())
        asyncio.get_running_loop().create_task(copy())
        return True

    p = await peer(answer)
    client = client_for(p.url)
    try:
        # When two calls are made one after the other, the second once the first's copy has arrived
        first = await client.chat(HELLO)
        await asyncio.wait_for(copies_sent[0].wait(), 5)
        await asyncio.sleep(0.05)  # the copy's bytes reach our idle connection
        second = await client.chat(HELLO)
    finally:
        await client.aclose()
    # Then each call gets its own answer (the second read the first's copy: another job's answer, another tenant's)
    assert (first.content, second.content) == ("answer-1", "answer-2")


async def test_a_stream_of_interim_answers_fails_the_try_after_ten(peer: Start) -> None:
    # Given an endpoint that answers with "102 Processing" and never stops
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        try:
            for _ in range(100_000):
                writer.write(b"HTTP/1.1 102 Processing\r\n\r\n" * 64)
                await writer.drain()
        except ConnectionError:
            pass
        return False

    p = await peer(answer)
    # When a call is made with no retries
    caught = await failed_call(client_for(p.url, max_retries=0, timeout_s=5.0), LLMUnavailable)
    # Then the try fails on the 11th interim answer as a protocol error (it parsed them until the timeout, a core
    # busy and every other job of the worker waiting)
    assert "transport error (ClientResponseError)" in str(caught.value), caught.value


@pytest.mark.parametrize("retry_after", ["inf", "1e400", "1e9", "-5", "garbage", "nan"])
async def test_a_hostile_retry_after_never_benches_the_key_beyond_the_cap(peer: Start, retry_after: str) -> None:
    # Given one key, and an endpoint whose first answer is a 429 with a hostile Retry-After
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(response(429, b"{}", headers=f"retry-after: {retry_after}\r\n") if n == 1 else ok("fine"))
        await writer.drain()
        return True

    p = await peer(answer)
    client = client_for(p.url)
    started = time.monotonic()
    try:
        # When a call is made
        result = await client.chat(HELLO)
    finally:
        await client.aclose()
    # Then the key came back within the cap (max_backoff_s) and the call succeeded
    assert result.content == "fine"
    assert time.monotonic() - started < 3.0


async def test_a_429_on_the_last_try_still_cools_the_key_down(peer: Start) -> None:
    # Given one key, no retries, and an endpoint that answers 429 with Retry-After: 20 (the cap is 30 here)
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(response(429, b"{}", headers="retry-after: 20\r\n"))
        await writer.drain()
        return True

    p = await peer(answer)
    client = client_for(p.url, max_retries=0, max_backoff_s=30.0, retry_budget_s=2.0)
    try:
        # When a call gets that 429 on its only try, and a second call follows
        with pytest.raises(LLMUnavailable, match="HTTP 429"):
            await client.chat(HELLO)
        with pytest.raises(LLMUnavailable, match="every API key is cooling down") as caught:
            await client.chat(HELLO)
    finally:
        await client.aclose()
    # Then the second call does not send the key the provider just benched for 20 s
    assert p.requests == 1, caught.value


async def test_an_unreachable_endpoint_is_named_in_the_error_without_credentials(caplog: pytest.LogCaptureFixture, refusing_port: int) -> None:
    # Given an endpoint URL with credentials, where nothing listens
    port = refusing_port
    client = client_for(f"http://alice:hunter2@127.0.0.1:{port}", max_retries=1)
    caplog.set_level(logging.DEBUG)
    # When a call is made
    caught = await failed_call(client, LLMUnavailable)
    # Then the error names the endpoint (host and port), and no secret is in it or in any log line
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message, message
    for secret in ("hunter2", "alice", SECRET):
        assert secret not in message
        assert secret not in caplog.text


# An answer's size: the client reads at most max_response_bytes of a 200 and 64 KiB of an error body.

LIMIT = 64 * 1024
HUGE = 32 * 1024 * 1024  # what each hostile answer would cost unbounded


async def send(writer: asyncio.StreamWriter, head: bytes, body: bytes, *, chunked: bool = False) -> None:
    """``head`` then ``body`` in 64 KiB pieces, each drained: the peer itself never holds more than one."""
    writer.write(head)
    view = memoryview(body)
    for i in range(0, len(body), 64 * 1024):
        piece = view[i:i + 64 * 1024]
        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        await writer.drain()
    if chunked:
        writer.write(b"0\r\n\r\n")
    await writer.drain()


def hostile_answer(kind: str) -> tuple[bytes, bytes, bool]:
    """(head, body, chunked) of a ``kind`` of answer that unbounded would cost HUGE bytes of memory."""
    big = completion("a" * HUGE)  # a valid completion: read whole, the call would succeed with it
    if kind == "content-length":
        return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(big), big, False
    if kind == "chunked":
        return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", big, True
    if kind == "gzip":  # ~32 KiB on the wire
        packed = gzip.compress(big, compresslevel=9)
        return b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(packed), packed, False
    error = orjson.dumps({"error": {"message": "overloaded " + "x" * HUGE}})
    return b"HTTP/1.1 503 Busy\r\ncontent-length: %d\r\n\r\n" % len(error), error, False


@pytest.mark.parametrize("kind", ["content-length", "chunked", "gzip", "error-body"])
async def test_a_huge_answer_costs_no_more_memory_than_the_limit_and_is_retried_on_a_new_connection(peer: Start, kind: str) -> None:
    # Given an endpoint whose first answer is HUGE bytes (or unpacks to them), then a normal one
    head, body, chunked = hostile_answer(kind)

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            await send(writer, head, body, chunked=chunked)
        else:
            writer.write(ok("fine"))
            await writer.drain()
        return True

    p = await peer(answer)
    client = client_for(p.url, max_response_bytes=LIMIT, max_retries=1)
    tracemalloc.start()
    try:
        # When a call is made
        result = await client.chat(HELLO)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await client.aclose()
    # Then the huge answer was a failed try, retried, and the call never held anything near its size;
    # a body over the limit on the wire was not drained: its connection was closed, the retry opened another
    assert result.content == "fine"
    assert p.requests == 2
    assert p.connections == 2 or kind == "gzip"  # gzip's 32 KiB may arrive whole first, and then its connection is fine
    assert peak < 8 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB while reading a {kind} answer"
    assert b"accept-encoding: identity" in p.heads[0].lower()


OVER_LIMIT = f"size limit of {LIMIT} bytes (STREAMCREW_LLM_MAX_RESPONSE_BYTES)"


@pytest.mark.parametrize(("kind", "says"), [("content-length", OVER_LIMIT), ("chunked", OVER_LIMIT),
                                            ("gzip", "content-encoding 'gzip'")], ids=["content-length", "chunked", "gzip"])
async def test_an_answer_over_the_limit_fails_the_call_naming_the_limit(peer: Start, kind: str, says: str) -> None:
    # Given an endpoint that always answers HUGE bytes (or gzip, which was not asked for)
    head, body, chunked = hostile_answer(kind)

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        await send(writer, head, body, chunked=chunked)
        return True

    p = await peer(answer)
    client = client_for(p.url, max_response_bytes=LIMIT, max_retries=1)
    # When a call is made
    caught = await failed_call(client, LLMUnavailable)
    # Then each try failed like a 502 (retried) and the error says why
    assert p.requests == 2
    assert says in str(caught.value), str(caught.value)


# A provider's error text: keys are redacted in the whole text before it is cut short.

AZURE_KEY = "9f3c2a7be41d58c06a9e3f17b2d4c85e"  # 32 hex characters, no sk-/key- prefix to look key-shaped


@pytest.mark.parametrize("message", [
    "x" * 130 + f" {AZURE_KEY} is not a valid key for this deployment",  # the old 160-character cut fell inside the key
    f"Incorrect API key provided: {AZURE_KEY[:12]}{'*' * 16}{AZURE_KEY[-4:]}. Find your key in the portal.",
], ids=["whole-key-across-the-cut", "provider-masked-prefix"])
async def test_no_run_of_8_characters_of_a_key_reaches_the_error(peer: Start, message: str) -> None:
    # Given an endpoint that quotes the key in its 401 message
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(response(401, orjson.dumps({"error": {"message": message}})))
        await writer.drain()
        return True

    p = await peer(answer)
    client = client_for(p.url, api_keys=AZURE_KEY)
    # When a call is made
    caught = await failed_call(client, LLMRequestError)
    # Then the error keeps the provider's words but no 8 characters of the key in a row
    error = str(caught.value)
    assert "HTTP 401" in error and ("not a valid key" in error or "Incorrect API key" in error), error
    leaks = [AZURE_KEY[i:i + 8] for i in range(len(AZURE_KEY) - 7) if AZURE_KEY[i:i + 8] in error]
    assert not leaks, error


@pytest.mark.parametrize("api_keys", [SECRET, ""], ids=["with-api-key", "url-credentials-only"])
async def test_a_provider_quoting_the_url_credentials_and_query_back_leaks_none_of_them(
    peer: Start, caplog: pytest.LogCaptureFixture, api_keys: str,
) -> None:
    # Given a base URL with a user, a password and a token in its query, and an endpoint that quotes them in its 401
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        quoted = ("bad credentials Basic bGxtdXNlcjpaWlBBU1NXT1JENzc= (llmuser:ZZPASSWORD77) "
                  "for url /v1/chat/completions?token=QQTOKEN5551 token=QQTOKEN5551 Bearer QQTOKEN5551")
        writer.write(response(401, orjson.dumps({"error": {"message": quoted}})))
        await writer.drain()
        return True

    p = await peer(answer)
    caplog.set_level(logging.DEBUG)
    host = p.url.removeprefix("http://")
    client = client_for(p.url, base_url=f"http://llmuser:ZZPASSWORD77@{host}/v1?token=QQTOKEN5551", api_keys=api_keys)
    # When a call is made
    caught = await failed_call(client, LLMRequestError)
    # Then the error (which reaches the result, the dead letter and the tenant) keeps the provider's words, no secret
    error = str(caught.value)
    assert "HTTP 401" in error and "bad credentials" in error, error
    for secret in ("ZZPASSWORD77", "QQTOKEN5551", "bGxtdXNlcjpaWlBBU1NXT1JENzc=", "llmuser"):
        assert secret not in error and secret not in caplog.text, (secret, error)


# The endpoint URL: a base URL's query stays after the path.

async def test_a_base_url_with_a_query_keeps_it_after_the_path(peer: Start, caplog: pytest.LogCaptureFixture) -> None:
    # Given an Azure-style base URL whose query holds the API version and a secret
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(ok("fine") if n == 1 else response(500, b"{}"))
        await writer.drain()
        return True

    p = await peer(answer)
    caplog.set_level(logging.DEBUG)
    client = client_for(p.url, base_url=p.url + "/openai/deployments/gpt4?api-version=2024-06-01&sig=q-secret", max_retries=0)
    try:
        # When a call succeeds and the next one fails
        result = await client.chat(HELLO)
        with pytest.raises(LLMUnavailable) as caught:
            await client.chat(HELLO)
    finally:
        await client.aclose()
    # Then the request went to the path with the query after it, and the query is in no error or log
    assert result.content == "fine"
    assert p.heads[0].startswith(b"POST /openai/deployments/gpt4/v1/chat/completions?api-version=2024-06-01&sig=q-secret HTTP/1.1\r\n")
    assert "q-secret" not in str(caught.value) and "q-secret" not in caplog.text


# A malformed 200: a failed try like a 502, retried, nothing booked.

def openai_200(body: object) -> bytes:
    return response(200, orjson.dumps(body), headers="content-type: application/json\r\n")


MESSAGE = {"role": "assistant", "content": "hi"}
MALFORMED = {
    "negative-tokens": ("openai", {"choices": [{"message": MESSAGE}], "usage": {"prompt_tokens": -5, "completion_tokens": 1}}),
    "word-tokens": ("openai", {"choices": [{"message": MESSAGE}], "usage": {"prompt_tokens": "lots"}}),
    "absurd-tokens": ("openai", {"choices": [{"message": MESSAGE}], "usage": {"prompt_tokens": 10**15, "completion_tokens": 1}}),
    # a count as a string of digits or a boolean is no count (it booked 900 M tokens, $378, and 1)
    "digit-string-tokens": ("openai", {"choices": [{"message": MESSAGE}], "usage": {"prompt_tokens": "900000000", "completion_tokens": 1}}),
    "boolean-tokens": ("openai", {"choices": [{"message": MESSAGE}], "usage": {"prompt_tokens": True, "completion_tokens": 1}}),
    "anthropic-digit-string-tokens": ("anthropic", {"content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": "7"}}),
    "tool-call-without-function": ("openai", {"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "c1"}]}}]}),
    "message-is-a-string": ("openai", {"choices": [{"message": "hello"}]}),
    "no-choices": ("openai", {"choices": []}),
    "content-not-a-list": ("anthropic", {"content": "hello", "usage": {"input_tokens": 1, "output_tokens": 1}}),
    "block-not-an-object": ("anthropic", {"content": ["hello"]}),
    "tool-use-without-name": ("anthropic", {"content": [{"type": "tool_use", "id": "t1", "input": {}}]}),
    "anthropic-negative-tokens": ("anthropic", {"content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": -1}}),
}


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_a_malformed_200_is_retried_and_then_unavailable_with_nothing_booked(peer: Start, ledger: UsageLedger, case: str) -> None:
    # Given an endpoint that always answers 200 with a malformed body, and a priced model
    provider, body = MALFORMED[case]

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(openai_200(body))
        await writer.drain()
        return True

    p = await peer(answer)
    client = client_for(p.url, provider=provider, max_retries=1, prices={"hostile-model": [0.42, 0.42]})
    # When a call is made
    caught = await failed_call(client, LLMUnavailable)
    # Then both tries failed like a 502, the error says the answer was malformed, and no usage was booked
    assert p.requests == 2
    assert "HTTP 200 with a malformed" in str(caught.value), str(caught.value)
    assert ledger.calls == 0


async def test_a_well_formed_answer_with_null_usage_books_zero_tokens(peer: Start, ledger: UsageLedger) -> None:
    # Given an endpoint whose answer carries a tool call with object arguments and null token counts
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"order": "ORD-1"}}}
    body = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": None}}

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(openai_200(body))
        await writer.drain()
        return True

    p = await peer(answer)
    client = client_for(p.url)
    try:
        result = await client.chat(HELLO, tools=TOOLS)
    finally:
        await client.aclose()
    # Then the call is read as before: the tool call in OpenAI's shape, zero tokens
    assert result.tool_calls == [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"order": "ORD-1"}'}}]
    assert (result.prompt_tokens, result.completion_tokens, result.finish_reason) == (0, 0, "tool_calls")
    assert ledger.calls == 1


# A well-formed 200 that is costly to read, or that quotes our secrets, or that counts no tokens.

async def answering(peer: Start, body: object) -> str:
    """An endpoint that answers every call 200 with ``body``; its URL."""
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(openai_200(body))
        await writer.drain()
        return True

    return (await peer(answer)).url


async def test_only_the_first_choice_is_read(peer: Start) -> None:
    # Given an answer with 20,000 choices, all but the first not even well formed: only the first is ever used, so only
    # it is read (validating all of 290,000 took seconds of the event loop, every other job of the worker waiting)
    many = [{"message": {"role": "assistant", "content": "choice 0"}}] + [{"message": f"choice {i}"} for i in range(1, 20_000)]
    client = client_for(await answering(peer, {"choices": many, "usage": {"prompt_tokens": 1, "completion_tokens": 1}}))
    try:
        # When a call is made, then it answers with the first choice
        assert (await client.chat(HELLO)).content == "choice 0"
    finally:
        await client.aclose()


async def test_an_answer_with_hundreds_of_tool_calls_is_malformed(peer: Start, ledger: UsageLedger) -> None:
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in range(300)]
    url = await answering(peer, {"choices": [{"message": {"role": "assistant", "tool_calls": calls}}]})
    caught = await failed_call(client_for(url, max_retries=0), LLMUnavailable)
    assert "300 tool calls, over the 256 read" in str(caught.value), str(caught.value)
    assert ledger.calls == 0


async def test_an_answer_without_token_counts_costs_unknown_not_zero(peer: Start, ledger: UsageLedger) -> None:
    # Given a priced model, and an endpoint whose answer reports no usage
    url = await answering(peer, {"choices": [{"message": MESSAGE}]})
    client = client_for(url, prices={"hostile-model": [0.42, 0.42]})
    try:
        result = await client.chat(HELLO)
    finally:
        await client.aclose()
    # Then the call's cost, and so the job's, is unknown (null), not a free call
    assert result.cost_usd is None and ledger.calls == 1 and ledger.cost_usd is None


async def test_an_answer_quoting_our_key_or_url_secrets_reaches_the_result_without_them(peer: Start) -> None:
    # Given an endpoint that echoes the request's key and URL in its answer (a proxy reporting an error as a completion)
    quoted = f"auth=Bearer {SECRET} user=llmuser:ZZPASSWORD77 url=/v1/chat/completions?token=QQTOKEN5551-abcdefgh&key=QK-9x1z2&api-version=2024-06-01"
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": orjson.dumps({"k": SECRET}).decode()}}
    url = await answering(peer, {"choices": [{"message": {"role": "assistant", "content": quoted, "tool_calls": [call]}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    host = url.removeprefix("http://")
    client = client_for(url, base_url=f"http://llmuser:ZZPASSWORD77@{host}/v1?token=QQTOKEN5551-abcdefgh&key=QK-9x1z2&api-version=2024-06-01")
    try:
        result = await client.chat(HELLO, tools=TOOLS)
    finally:
        await client.aclose()
    # Then the answer (the job's result, record and webhook) holds none of them; an api-version date stays as it was
    text = (result.content or "") + result.tool_calls[0]["function"]["arguments"]
    # (a short value of a parameter named like a credential too: ``key=QK-9x1z2`` reached the result before)
    for secret in (SECRET, "ZZPASSWORD77", "QQTOKEN5551-abcdefgh", "QK-9x1z2"):
        assert secret not in text, (secret, text)
    assert "key#1" in text and "api-version=2024-06-01" in text, text


async def test_a_base_url_with_a_password_only_sends_the_key_alone(peer: Start) -> None:
    # Given a base URL with a password and no user, and an API key (before: every call failed with a bare ValueError)
    url = await answering(peer, {"choices": [{"message": MESSAGE}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    client = client_for(url, base_url=f"http://:ZZPASSWORD77@{url.removeprefix('http://')}/v1")
    try:
        assert (await client.chat(HELLO)).content == "hi"
    finally:
        await client.aclose()


async def test_a_tool_call_whose_id_and_name_quote_our_key_reaches_the_caller_without_it(peer: Start) -> None:
    # Given an endpoint that echoes the request's key as a tool call's id and function name (its arguments were cleaned,
    # these were not: CrewAI then quoted the call, key and all, in the job's error, dead letter and the worker's log)
    call = {"id": f"id-{SECRET}", "type": "function", "function": {"name": SECRET, "arguments": "{}"}}
    url = await answering(peer, {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    client = client_for(url)
    try:
        result = await client.chat(HELLO, tools=TOOLS)
    finally:
        await client.aclose()
    # Then the call reaches the caller with the key's label in its place
    (got,) = result.tool_calls
    assert (got["id"], got["function"]["name"]) == ("id-key#1", "key#1"), got


NESTED = b'{"a":' * 1000 + b"{}" + b"}" * 1000  # 1,001 levels: legal for orjson (1,024), past json.dumps' recursion limit
DEEP = {
    "openai": b'{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",'
              b'"function":{"name":"f","arguments":' + NESTED + b'}}]},"finish_reason":"tool_calls"}],'
              b'"usage":{"prompt_tokens":1,"completion_tokens":1}}',
    "anthropic": b'{"content":[{"type":"tool_use","id":"t1","name":"f","input":' + NESTED + b'}],'
                 b'"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}',
}


@pytest.mark.parametrize("provider", list(DEEP))
async def test_tool_arguments_nested_a_thousand_deep_are_a_malformed_answer_retried_and_counted(
    peer: Start, ledger: UsageLedger, provider: str,
) -> None:
    # Given an endpoint whose 200 holds a tool call with an arguments object (Anthropic: input) 1,001 levels deep
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(response(200, DEEP[provider], headers="content-type: application/json\r\n"))
        await writer.drain()
        return True

    p = await peer(answer)
    model = f"deep-{provider}"
    counted = REGISTRY.get_sample_value("streamcrew_llm_requests_total", {"model": model, "status": "502"}) or 0.0
    # When a call is made, with one retry
    caught = await failed_call(client_for(p.url, provider=provider, model=model, max_retries=1), LLMUnavailable)
    # Then both tries failed like a 502 (RecursionError escaped the client: no retry, no metric, no word of the answer)
    assert p.requests == 2
    assert "HTTP 200 with a malformed" in str(caught.value), str(caught.value)
    assert REGISTRY.get_sample_value("streamcrew_llm_requests_total", {"model": model, "status": "502"}) == counted + 2
    assert ledger.calls == 0


TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


async def test_a_tool_call_in_answer_to_a_request_that_offered_no_tools_is_a_failed_try(peer: Start, ledger: UsageLedger) -> None:
    # Given an endpoint that answers with a tool call and no text, whatever it was offered
    url = await answering(peer, {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    counted = REGISTRY.get_sample_value("streamcrew_llm_requests_total", {"model": "unoffered", "status": "502"}) or 0.0
    # When a call that offers no tools is made (CrewAI's last round; before, it got the list where it takes text)
    caught = await failed_call(client_for(url, model="unoffered", max_retries=1), LLMUnavailable)
    # Then each try failed like a malformed answer, retried and counted, and the error says why
    assert "the model answered with a tool call when none was offered" in str(caught.value), str(caught.value)
    assert "gave up after 2 attempt(s)" in str(caught.value), str(caught.value)
    assert REGISTRY.get_sample_value("streamcrew_llm_requests_total", {"model": "unoffered", "status": "502"}) == counted + 2
    assert ledger.calls == 0


async def test_an_answer_with_text_and_a_tool_call_no_tools_were_offered_for_is_its_text(peer: Start) -> None:
    # Given an endpoint that answers with text and a tool call
    url = await answering(peer, {"choices": [{"message": {"role": "assistant", "content": "the answer", "tool_calls": [TOOL_CALL]}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    client = client_for(url)
    try:
        # When a call offers no tools, and then one does
        unoffered, offered = await client.chat(HELLO), await client.chat(HELLO, tools=TOOLS)
    finally:
        await client.aclose()
    # Then the first is its text alone, the second its text and its tool call
    assert (unoffered.content, unoffered.tool_calls) == ("the answer", [])
    assert (offered.content, [c["function"]["name"] for c in offered.tool_calls]) == ("the answer", ["lookup"])


async def test_an_answer_of_many_small_containers_is_read_without_the_garbage_collector(peer: Start) -> None:
    # Given an endpoint whose answer carries ~1.9 MiB of tiny lists beside a valid completion (1.2 M of them, in a field
    # the client never reads): reading it ran the cyclic garbage collector some 2,000 times over the growing tree,
    # ~0.5 s of the event loop per answer, every other job of the worker waiting
    junk = b"[" + b",".join([b"[[]]"] * 390_000) + b"]"
    answer_body = completion("fine")[:-1] + b',"junk":' + junk + b"}"

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(response(200, answer_body, headers="content-type: application/json\r\n"))
        await writer.drain()
        return True

    client = client_for((await peer(answer)).url)
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        # When a call reads it
        result = await client.chat(HELLO)
    finally:
        gc.callbacks.remove(count)
        await client.aclose()
    # Then the answer is read, and the collector ran no more than the call's own few allocations make it
    assert result.content == "fine"
    assert len(collections) < 50, f"{len(collections)} collections during one call"


# An answer's bytes on the wire: its body is bounded by max_response_bytes, its head and chunk framing by a slack.

def chunked_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"


def in_chunks(body: bytes, size: int, extension: bytes = b"") -> Iterator[bytes]:
    """``body`` as chunks of ``size`` bytes (each with ``extension`` after its size), then the last chunk, in pieces of
    about 64 KiB: made as they are sent, so a peer that stops reading never has them all made."""
    piece: list[bytes] = []
    held = 0
    for i in range(0, len(body), size):
        piece.append(b"%x%s\r\n%s\r\n" % (len(body[i:i + size]), extension, body[i:i + size]))
        held += len(piece[-1])
        if held >= 64 * 1024:
            yield b"".join(piece)
            piece, held = [], 0
    yield b"".join(piece) + b"0\r\n\r\n"


async def send_chunked(writer: asyncio.StreamWriter, body: bytes, size: int, extension: bytes = b"") -> bool:
    """A 200 of ``body`` in chunks, each piece drained; False once the client has closed the connection."""
    try:
        writer.write(chunked_head())
        for piece in in_chunks(body, size, extension):
            writer.write(piece)
            await writer.drain()
    except ConnectionError:
        return False
    return True


@pytest.mark.parametrize(("size", "extension"), [(1, b""), (1, b";" + b"e" * 60_000)], ids=["1-byte-chunks", "chunk-extensions"])
async def test_an_answer_far_larger_on_the_wire_than_its_body_fails_the_try_on_its_wire_bytes(
    peer: Start, size: int, extension: bytes,
) -> None:
    # Given an endpoint whose answer is a valid completion under the size limit, sent in 1-byte chunks (6 wire bytes a
    # body byte: 2.1 s of CPU for a 2 MiB answer) or with 60 kB chunk extensions (never reaching the limit: it ran to the
    # timeout), and a normal answer to the retry
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            return await send_chunked(writer, completion("x" * (LIMIT - 1024)), size, extension)
        writer.write(ok("fine"))
        await writer.drain()
        return True

    p = await peer(answer)
    model = f"wire-{size}-{len(extension)}"
    client = client_for(p.url, max_response_bytes=LIMIT, max_retries=1, model=model)
    try:
        # When a call is made
        result = await client.chat(HELLO)
    finally:
        await client.aclose()
    # Then the first answer failed the try as refused (502), not by the timeout, once its wire bytes passed its body's
    # by the slack; its connection was closed, and the retry got the normal answer on a new one
    assert result.content == "fine"
    assert (p.requests, p.connections) == (2, 2)
    tries = {status: REGISTRY.get_sample_value("streamcrew_llm_requests_total", {"model": model, "status": status})
             for status in ("502", "timeout", "200")}
    assert tries == {"502": 1.0, "timeout": None, "200": 1.0}, tries


async def test_an_answer_past_its_wire_limit_is_named_in_the_error(peer: Start) -> None:
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        return await send_chunked(writer, completion("x" * (LIMIT - 1024)), 1)

    caught = await failed_call(client_for((await peer(answer)).url, max_response_bytes=LIMIT, max_retries=0), LLMUnavailable)
    assert "an answer over its wire limit (" in str(caught.value) and "STREAMCREW_LLM_MAX_RESPONSE_BYTES" in str(caught.value), caught.value


async def test_answers_in_small_chunks_near_the_limit_are_read_call_after_call_on_one_connection(peer: Start) -> None:
    # Given an endpoint whose answers are just under the size limit, in chunks of 256 bytes (7 bytes of framing each)
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        return await send_chunked(writer, completion(f"answer-{n} " + "x" * (LIMIT - 1024)), 256)

    p = await peer(answer)
    client = client_for(p.url, max_response_bytes=LIMIT)
    try:
        # When three calls are made one after the other
        results = [await client.chat(HELLO) for _ in range(3)]
    finally:
        await client.aclose()
    # Then each is read, on the one kept-alive connection: each answer's wire bytes are its own
    assert [(r.content or "")[:9] for r in results] == ["answer-1 ", "answer-2 ", "answer-3 "]
    assert (p.requests, p.connections) == (3, 1)
