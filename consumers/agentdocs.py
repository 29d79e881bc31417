"""Generates the reference parts of docs/agents.md and docs/llm.md from the code, so they cannot drift.

``python -m consumers.agentdocs`` rewrites the blocks between ``<!-- generated:NAME -->`` and
``<!-- /generated:NAME -->`` in place; ``--check`` only compares (a test runs it). The agents
reference walks the built-in registry: each agent's docstring, its input model's fields, and its
example request (the model's ``examples``) run on the offline model, whose result is printed.
Result values vary with CrewAI's prompts, so ``--check`` compares results by shape only.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, RootModel

ROOT = Path(__file__).resolve().parent.parent
FREEFORM_EXAMPLE: dict[str, Any] = {"text": "hello"}  # the example of an agent without an input model
_BLOCK = re.compile(r"(<!-- generated:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)", re.DOTALL)
_RESULT = re.compile(r"(```json\n)(.*?)(```)", re.DOTALL)


def _type(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if "$ref" in schema:
        return f"object ({schema['$ref'].rsplit('/', 1)[-1]})"
    return str(schema.get("type", "any"))


def _constraints(schema: dict[str, Any]) -> str:
    parts = []
    for variant in [schema, *schema.get("anyOf", [])]:
        for key, label in (("minLength", "min length"), ("maxLength", "max length"), ("minimum", "≥"), ("maximum", "≤"),
                           ("exclusiveMinimum", ">"), ("exclusiveMaximum", "<")):
            if key in variant:
                parts.append(f"{label} {variant[key]}")
        if "pattern" in variant:
            parts.append(f"pattern `{variant['pattern']}`")
        if "enum" in variant:
            parts.append("one of " + ", ".join(f"`{v}`" for v in variant["enum"]))
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fields_table(model: type[BaseModel]) -> list[str]:
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    lines = ["| field | type | required | default | constraints | meaning |", "|---|---|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        description = prop.get("description", "")
        if not description:
            raise ValueError(f"{model.__name__}.{name} has no description; give its Field a description=")
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop and name not in required else ""
        lines.append(f"| `{name}` | {_type(prop)} | {'yes' if name in required else 'no'} | {_cell(default)} | "
                     f"{_cell(_constraints(prop))} | {_cell(description)} |")
    extra = model.model_config.get("extra")
    lines += ["", "Other fields are rejected." if extra == "forbid" else "Other fields are ignored." if extra in (None, "ignore") else "Other fields are kept."]
    return lines


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation names (``A | B | None`` gives ``[A, B]``)."""
    args = typing.get_args(annotation) or (annotation,)
    return [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]


def shapes(model: type[BaseModel]) -> list[type[BaseModel]]:
    """The shapes an input model accepts: a ``RootModel`` union's members, else the model itself."""
    if issubclass(model, RootModel):
        return _models_in(model.model_fields["root"].annotation)
    return [model]


def _input_lines(model: type[BaseModel]) -> list[str]:
    members = shapes(model)
    lines = [f"Input (`{model.__name__}`) takes one of {len(members)} shapes.", ""] if len(members) > 1 else []
    for member in members:
        doc = (member.__doc__ or "").strip()
        lines += [f"Input (`{member.__name__}`){': ' + doc if doc else ''}", "", *_fields_table(member), ""]
        for field, info in member.model_fields.items():
            for nested in _models_in(info.annotation):
                doc = (nested.__doc__ or "").strip()
                lines += [f"Its `{field}` (`{nested.__name__}`){': ' + doc if doc else ''}", "", *_fields_table(nested), ""]
    return lines


def _example(spec: Any) -> dict[str, Any]:
    if spec.input_model is None:
        return dict(FREEFORM_EXAMPLE)
    for model in [spec.input_model, *shapes(spec.input_model)]:
        examples = (model.model_config.get("json_schema_extra") or {}).get("examples")
        if examples:
            return dict(examples[0])
    raise ValueError(f"agent {spec.name!r}: {spec.input_model.__name__} has no example; add "
                     "model_config = ConfigDict(json_schema_extra={'examples': [{...}]})")


def _canonical(registry: Any) -> tuple[list[str], dict[str, list[str]]]:
    """Agent names, and the aliases served for each (a name whose spec was registered under another)."""
    names, aliases = [], {}
    for name in registry.names():
        target = registry.get(name).name
        if target != name and target in registry:
            aliases.setdefault(target, []).append(name)
        else:
            names.append(name)
    return names, aliases


async def _run_examples(registry: Any) -> dict[str, tuple[dict[str, Any], Any, Any]]:
    from agents.registry import AgentContext
    from agents.runner import run_agent

    out = {}
    for name in _canonical(registry)[0]:
        spec = registry.get(name)
        example = _example(spec)
        ctx = AgentContext(job_id=f"doc-{name}", agent=name, attempt=1, max_attempts=3)
        try:
            output, usage = await run_agent(spec, example, ctx, timeout_s=120)
        except Exception as exc:
            raise RuntimeError(f"agent {name!r}: its documented example {example} does not complete offline: {exc!r}") from None
        out[name] = (example, output, usage)
    return out


def render_agents() -> str:
    """The built-in agents' reference, each example run on the offline model."""
    from agents.builtin import builtin_registry
    from agents.llm import runtime
    from agents.llm.settings import LLMSettings

    registry = builtin_registry()
    runtime.configure(LLMSettings(base_url=None))
    try:
        runs = asyncio.run(_run_examples(registry))
    finally:
        runtime.configure(None)
    names, aliases = _canonical(registry)
    lines = ["| agent | what it does | input model |", "|---|---|---|"]
    for name in names:
        spec = registry.get(name)
        model = spec.input_model.__name__ if spec.input_model else "none (any JSON object)"
        lines.append(f"| [`{name}`](#{name}) | {_cell(spec.description)} | {model} |")
        lines += [f"| `{alias}` | the same as [`{name}`](#{name}) | {model} |" for alias in aliases.get(name, [])]
    lines.append("")
    for name in names:
        spec = registry.get(name)
        example, output, usage = runs[name]
        lines += [f"### `{name}`", "", (inspect.getdoc(spec.fn) or "").strip(), ""]
        if aliases.get(name):
            lines += ["Also served as " + ", ".join(f"`{a}`" for a in aliases[name]) + ".", ""]
        limits = ["async, on the worker's event loop" if spec.is_async else "sync, in the worker's thread pool"]
        limits.append(f"timeout {spec.timeout_s:g} s per attempt" if spec.timeout_s else "no timeout of its own (the request's `timeout_s` applies)")
        if spec.max_attempts:
            limits.append(f"{spec.max_attempts} attempts")
        lines += ["Runs: " + "; ".join(limits) + ".", ""]
        lines += _input_lines(spec.input_model) if spec.input_model is not None else ["Input: any JSON object (no input model).", ""]
        data = json.dumps(example, ensure_ascii=False)
        # a result event carries usage only when an LLM was called (contract §3): none is shown where it has none
        shown = {"status": "completed", "result": output} | ({"usage": usage} if usage is not None else {})
        what = ("(`result` and `usage` of the result event)" if usage is not None
                else "(`result` of the result event; it has no `usage`: the agent calls no LLM)")
        lines += ["Example request:", "", "```bash", f"streamcrew submit {name} --data '{data}' --wait", "```", "",
                  f"Its result on the offline model {what}:", "",
                  "```json", json.dumps(shown, indent=2, ensure_ascii=False), "```", ""]
    return "\n".join(lines)


def render_prices() -> str:
    """The built-in price table."""
    from agents.llm.pricing import SEED_PRICES

    lines = ["| model | prompt, USD per million tokens | completion, USD per million tokens |", "|---|---|---|"]
    for model, price in SEED_PRICES.items():
        lines.append(f"| `{model}` | {price.prompt_per_m:g} | {price.completion_per_m:g} |")
    return "\n".join(lines) + "\n"


def call_seconds(settings: Any, try_s: float, jitter: float = 1.0) -> tuple[float, int]:
    """(seconds, tries) of one LLM call whose every try fails after ``try_s``: the client's retry loop, without the I/O."""
    t, tries = 0.0, 0
    while True:
        tries += 1
        t += try_s
        if tries > settings.max_retries:
            return t, tries
        wait = min(settings.max_backoff_s, settings.backoff_s * 2 ** (tries - 1)) * jitter
        if t + wait > settings.retry_budget_s:
            return t, tries
        t += wait


def render_worst_case() -> str:
    """How long one call holds a job at the default settings, per kind of dead endpoint."""
    from agents.llm.settings import LLMSettings

    s = LLMSettings.model_construct()  # the defaults, never this machine's environment
    rows = [
        ("refuses connections (nothing listening, DNS fails): each try fails at once", 0.0),
        (f"drops packets: each try waits the {s.connect_timeout_s:g} s connect timeout", s.connect_timeout_s),
        (f"accepts and never answers: each try waits the {s.timeout_s:g} s timeout", s.timeout_s),
    ]
    lines = ["| the endpoint | one call, computed from the defaults (waits × 0.5–1.5 jitter) |", "|---|---|"]
    for label, try_s in rows:
        nominal, tries = call_seconds(s, try_s)
        spans = [call_seconds(s, try_s, jitter)[0] for jitter in (0.5, 1.0, 1.5)]
        low, high = min(spans), max(spans)
        spread = f" ({low:.0f}–{high:.0f} s)" if round(low) != round(high) else ""
        lines.append(f"| {label} | {tries} {'try' if tries == 1 else 'tries'}, **{nominal:.0f} s**{spread} |")
    worst = s.retry_budget_s + s.timeout_s  # timeout_s bounds a whole request, connecting included
    lines.append(f"| the worst: fast failures for almost the {s.retry_budget_s:g} s budget, then a try that hangs "
                 f"| {s.retry_budget_s:g} + {s.timeout_s:g} = **{worst:.0f} s** |")
    return "\n".join(lines) + "\n"


PAGES: dict[str, dict[str, Callable[[], str]]] = {
    "docs/agents.md": {"agents": render_agents},
    "docs/llm.md": {"prices": render_prices, "worst-case": render_worst_case},
}


def splice(text: str, blocks: dict[str, str]) -> str:
    """``text`` with each generated block replaced; a block named but missing in ``text`` is an error."""
    seen = set()

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in blocks:
            return match.group(0)
        seen.add(name)
        body = blocks[name].rstrip("\n") + "\n"
        return match.group(1) + body + match.group(4)

    out = _BLOCK.sub(replace, text)
    missing = set(blocks) - seen
    if missing:
        raise ValueError(f"no <!-- generated:NAME --> ... <!-- /generated:NAME --> block for {sorted(missing)}")
    return out


def shape(text: str) -> str:
    """``text`` with the JSON examples of its generated blocks reduced to keys and value types (values vary with CrewAI)."""

    def skeleton(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: skeleton(v) for k, v in value.items()}
        if isinstance(value, list):
            return [skeleton(v) for v in value]
        return type(value).__name__

    def reduce(block: re.Match[str]) -> str:
        body = _RESULT.sub(lambda m: m.group(1) + json.dumps(skeleton(json.loads(m.group(2))), indent=2) + "\n" + m.group(3), block["body"])
        return block.group(1) + body + block.group(4)

    return _BLOCK.sub(reduce, text)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for page, renderers in PAGES.items():
        path = ROOT / page
        current = path.read_text()
        fresh = splice(current, {name: render() for name, render in renderers.items()})
        if check:
            if shape(current) != shape(fresh):
                stale.append(page)
        elif fresh != current:
            path.write_text(fresh)
            print(f"wrote {page}")
    if stale:
        print(f"stale: {', '.join(stale)}; run `python -m consumers.agentdocs`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
