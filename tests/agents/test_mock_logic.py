"""The deterministic model shared by mock-llm, the offline model and tests."""

from __future__ import annotations

import json

from agents.llm import mock_logic

TOOLS = [
    {"type": "function", "function": {"name": "lookup_order", "description": "Look up an order by its order number: status, tracking.",
                                      "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}},
    {"type": "function", "function": {"name": "check_inventory", "description": "Check stock of a product by SKU.",
                                      "parameters": {"type": "object", "properties": {"sku": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                                                     "required": ["sku"]}}},
]


def test_same_request_same_answer_and_usage_from_text_length() -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
    first, second = mock_logic.openai_response(request), mock_logic.openai_response(request)
    assert first == second
    assert first["usage"]["prompt_tokens"] == mock_logic.tokens_of("hello there")
    assert first["usage"]["completion_tokens"] == mock_logic.tokens_of(first["choices"][0]["message"]["content"])


def test_tools_lead_to_a_call_of_the_best_matching_tool_with_filled_arguments() -> None:
    request = {"messages": [{"role": "user", "content": "Where is my order ORD-777? Tracking please"}], "tools": TOOLS}
    message = mock_logic.openai_response(request)["choices"][0]["message"]
    call = message["tool_calls"][0]["function"]
    assert call["name"] == "lookup_order"
    assert json.loads(call["arguments"]) == {"order_id": "ORD-777"}


def test_a_nullable_id_without_an_id_in_the_text_is_null() -> None:
    request = {"messages": [{"role": "user", "content": "is the product in stock"}], "tools": TOOLS}
    call = mock_logic.openai_response(request)["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "check_inventory"
    assert json.loads(call["arguments"]) == {"sku": None}


def test_after_a_tool_result_the_answer_quotes_it() -> None:
    request = {"messages": [
        {"role": "user", "content": "Where is ORD-1?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"status": "shipped"}'},
    ], "tools": TOOLS}
    message = mock_logic.openai_response(request)["choices"][0]["message"]
    assert "tool_calls" not in message
    assert "lookup_order says" in message["content"] and "shipped" in message["content"]


def test_anthropic_shape_with_tool_use() -> None:
    request = {"system": "be brief", "max_tokens": 100, "messages": [{"role": "user", "content": "order ORD-5 status"}],
               "tools": [{"name": "lookup_order", "description": "order status", "input_schema": TOOLS[0]["function"]["parameters"]}]}
    answer = mock_logic.anthropic_response(request)
    assert answer["type"] == "message" and answer["stop_reason"] == "tool_use"
    assert answer["content"][0] == {"type": "tool_use", "id": answer["content"][0]["id"], "name": "lookup_order", "input": {"order_id": "ORD-5"}}
    assert set(answer["usage"]) == {"input_tokens", "output_tokens"}
