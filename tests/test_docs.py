"""Every command, option and variable the README and docs name exists; the configuration reference is current."""

import re
from pathlib import Path

import pytest
import typer

from consumers.cli import app
from consumers.docgen import env_names, render, settings_classes, walk

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
NOT_SETTINGS = {"STREAMCREW_TEST_REDIS_URL", "STREAMCREW_TEST_KAFKA"}  # read by the test suite's fixtures only


def _commands() -> dict[tuple[str, ...], set[str]]:
    root = typer.main.get_command(app)
    out = {}
    for path, command in walk(root):
        out[path] = {o for p in command.params for o in (*p.opts, *getattr(p, "secondary_opts", []))}
    return out


def test_configuration_reference_is_generated_from_the_code() -> None:
    current = (ROOT / "docs" / "configuration.md").read_text()
    assert current == render(), "docs/configuration.md is stale: run `python -m consumers.docgen > docs/configuration.md`"


def _code(text: str) -> list[str]:
    """Shell-ish snippets: fenced code block lines and inline `code` spans."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        out += [line] if fenced else re.findall(r"`([^`]+)`", line)
    return out


def _invocations(snippet: str) -> list[list[str]]:
    """``streamcrew ...`` invocations in a snippet, up to a shell separator (not ``kubectl -n streamcrew``)."""
    tokens = re.sub(r"(^|\s)#.*$", "", snippet).replace("\\", " ").split()
    found = []
    for i, token in enumerate(tokens):
        if token == "streamcrew" and (i == 0 or not tokens[i - 1].startswith("-")):
            words = []
            for t in tokens[i + 1:]:
                if t in {"|", "||", "&&", ";", "#", ">", "2>&1"}:
                    break
                words.append(t)
            found.append(words)
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_commands_and_options_exist(doc: Path) -> None:
    commands = _commands()
    groups = {path[:i] for path in commands for i in range(1, len(path))}
    problems = []
    for snippet in _code(doc.read_text()):
        for words in _invocations(snippet):
            path: tuple[str, ...] = ()
            for word in words:
                if (*path, word) in commands or (*path, word) in groups:
                    path = (*path, word)
                elif word.startswith("-") or path:
                    break
                else:
                    problems.append(f"unknown command `streamcrew {' '.join(words)}` in: {snippet.strip()}")
                    break
            if not path or path in groups:
                continue
            for option in {m.group(0) for w in words if (m := re.match(r"--[a-z][a-z-]*", w))} - commands[path]:
                problems.append(f"`streamcrew {' '.join(path)}` has no option {option}: {snippet.strip()}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_variables_exist(doc: Path) -> None:
    known = set().union(*(env_names(cls) for _, cls in settings_classes()))
    named = set(re.findall(r"STREAMCREW_[A-Z0-9_]+", doc.read_text()))
    missing = sorted(n for n in named - known - NOT_SETTINGS if not n.endswith("_"))
    assert not missing, f"{doc.name} names variables no settings model reads: {missing}"


def test_the_generator_refuses_a_setting_without_a_meaning(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_settings import BaseSettings, SettingsConfigDict

    import consumers.docgen

    class Undescribed(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="STREAMCREW_DOCTEST_")
        knob: int = 1

    monkeypatch.setattr(consumers.docgen, "settings_classes", lambda: [("a process", Undescribed)])
    with pytest.raises(ValueError, match="STREAMCREW_DOCTEST_KNOB has no description"):
        render()


def test_the_monitor_sample_shows_the_rows_monitor_prints_in_its_order() -> None:
    """docs/operations.md's Queue Performance Report: its rows are the report's, none left out before its `...`."""
    from consumers.monitor import report_rows

    page = (ROOT / "docs" / "operations.md").read_text()
    sample = page.split("=== Queue Performance Report", 1)[1].split("```", 1)[0].splitlines()[1:]
    shown = [line.split(":", 1)[0] for line in sample if line != "..." and not line.startswith(("Model ", "Tenant "))]
    lane = {"lag": 0, "length": 0, "pending": 0}
    spread = dict.fromkeys(("avg", "p50", "p95", "p99"))
    figures = {
        "prefix": "streamcrew", "lanes": {"high": lane, "normal": lane, "low": lane}, "window": {"results": 0, "size": 1000},
        "retrying": 0, "completed": 0, "failed": 0, "rejected": 0, "expired": 0, "dead_letters": 0,
        "latency_ms": spread, "queue_wait_ms": spread, "tokens": 0, "cost_usd": 0.0, "unpriced": 0, "by_model": {}, "by_tenant": {},
    }
    printed = [name for name, _ in report_rows(figures)]
    assert shown == printed[:len(shown)], f"the sample shows {shown}; monitor prints {printed}"
