"""A settings error never quotes what was given: the values hold keys, secrets and URLs with passwords.

The CLI prints each error's message only; a process that builds its settings itself (``python -m
consumers.gateway``, an app embedding the gateway or the notifier) shows pydantic's whole text, which
quotes each bad input unless the model hides it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from consumers.gateway.settings import GatewaySettings
from consumers.kafka_bridge.settings import KafkaBridgeSettings
from consumers.notifier.settings import NotifierSettings

SECRET = "s3cret-Zq81"


@pytest.mark.parametrize(("settings", "given"), [
    (GatewaySettings, {"api_keys": f"{SECRET}:"}),  # a template's unset tenant
    (GatewaySettings, {"api_keys": f"{SECRET},{SECRET}:acme"}),  # a key listed twice
    (NotifierSettings, {"subscriptions": f'[{{"url": "ftp://hook:{SECRET}@receiver.example/in"}}]'}),
    (NotifierSettings, {"webhook_tenant_secrets": f'{{"acme": "wh_{SECRET}"}}'}),  # not whsec_
    (NotifierSettings, {"webhook_secret": f"wh_{SECRET}"}),
    (KafkaBridgeSettings, {"kafka_broker": f"sasl_ssl://bridge:{SECRET}@broker.example:9093"}),
], ids=["gateway-key-no-tenant", "gateway-key-twice", "notifier-subscription-url", "notifier-tenant-secrets",
        "notifier-secret", "kafka-broker"])
def test_a_settings_error_quotes_no_input(settings: type[BaseModel], given: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as caught:
        settings(**given)
    assert SECRET not in str(caught.value), str(caught.value)


def test_the_gateway_module_entry_point_shows_no_key_of_a_bad_key_list() -> None:
    # `python -m consumers.gateway` builds its settings itself: a slip in the key list ends it with pydantic's text
    run = subprocess.run([sys.executable, "-m", "consumers.gateway", "--port", "0", "--redis-url", "redis://127.0.0.1:1/0"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "STREAMCREW_API_KEYS": f"{SECRET},{SECRET}:acme"})
    assert run.returncode != 0
    assert "repeats an earlier entry's key" in run.stderr, run.stderr
    assert SECRET not in run.stderr + run.stdout, run.stderr


# typer 0.16 - 0.x (pyproject allows them) print every frame's locals with an uncaught error; this installs that default.
LOCALS_ON = ("import sys, typer; typer.Typer.__init__.__kwdefaults__['pretty_exceptions_show_locals'] = True; "
             "sys.argv = ['streamcrew', *sys.argv[1:]]; from consumers.cli import main; main()")


def test_an_uncaught_error_in_a_command_prints_no_locals() -> None:
    # Given a worker given an LLM key and a Redis password on its command line, and an --app that fails on import
    run = subprocess.run([sys.executable, "-c", LOCALS_ON, "worker", "--app", "tests.agents.broken_app", "--metrics-port", "0",
                          "--llm-api-keys", f"sk-{SECRET}", "--redis-url", f"redis://:{SECRET}@127.0.0.1:1/0"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    # Then the traceback names the error, and no frame's locals show the secrets
    assert run.returncode != 0 and "broken on purpose" in run.stderr, run.stderr
    assert SECRET not in run.stderr + run.stdout, run.stderr
