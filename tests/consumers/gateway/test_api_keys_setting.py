"""STREAMCREW_API_KEYS: a slip in the list refuses to start rather than widen a key's access."""

from __future__ import annotations

import os
import subprocess

import pytest
from pydantic import ValidationError

from consumers.gateway.settings import GatewaySettings
from consumers.processes import streamcrew_cmd


@pytest.mark.parametrize(("keys", "says"), [
    ("ops-key,acme-key:", "entry 2 ends in ':' with no tenant"),          # a template's unset $TENANT: not an operator key
    ("k-1:acme,k-1:globex", "entry 2 repeats an earlier entry's key"),   # not silently bound to the last tenant
    (":acme", "entry 1 has no key"),
    ("k-1:ac me", "entry 1's tenant holds whitespace"),
], ids=["empty-tenant", "key-twice", "no-key", "tenant-with-space"])
def test_the_gateway_refuses_a_key_list_that_would_widen_access(keys: str, says: str) -> None:
    # Given a key list with a slip; When the gateway starts
    run = subprocess.run(streamcrew_cmd("gateway", "--port", "0", "--redis-url", "redis://127.0.0.1:1/0"),
                         capture_output=True, text=True, timeout=60, env={**os.environ, "STREAMCREW_API_KEYS": keys})
    # Then it exits at once, in one line naming the variable and the entry, never the key
    assert run.returncode != 0
    assert "STREAMCREW_API_KEYS" in run.stderr and says in run.stderr, run.stderr
    assert "k-1" not in run.stderr and "acme-key" not in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_well_formed_keys_bind_as_written() -> None:
    settings = GatewaySettings(api_keys="ops-key, acme-key:acme ,globex-key:globex")  # type: ignore[arg-type]
    assert settings.key_tenants() == {"ops-key": None, "acme-key": "acme", "globex-key": "globex"}


@pytest.mark.parametrize("key", ["clé-1", "k 1", "k\t1"], ids=["non-ascii", "space", "tab"])
def test_a_key_no_header_can_carry_is_refused_at_start(key: str) -> None:
    # Given a key no client can present (a header reaches the gateway as latin-1, a space splits the scheme's token);
    # When the settings are read; Then they are refused, naming the entry, never the key
    with pytest.raises(ValidationError) as caught:
        GatewaySettings(api_keys=f"ops-key,{key}:acme")  # type: ignore[arg-type]
    assert "entry 2's key holds a character other than visible ASCII" in str(caught.value)
    assert key not in str(caught.value)

