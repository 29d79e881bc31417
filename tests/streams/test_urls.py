"""URLs in logs: credentials, query and fragment never shown."""

from streams.urls import loggable_url


def test_loggable_url_keeps_scheme_host_port_and_path_only() -> None:
    assert loggable_url("https://u:p@llm.example:8443/v1/x?key=s#f") == "https://llm.example:8443/v1/x"
    assert loggable_url("http://[::1]:80/h?t=1") == "http://[::1]:80/h"
    assert loggable_url("http://host:notaport/") == "(unparseable URL)"
