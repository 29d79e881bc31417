"""URLs in logs: credentials, query and fragment never shown."""

from streams.urls import loggable_url


def test_loggable_url_keeps_scheme_host_port_and_path_only() -> None:
    assert loggable_url("https://u:p@llm.example:8443/v1/x?key=s#f") == "https://llm.example:8443/v1/x"
    assert loggable_url("http://[::1]:80/h?t=1") == "http://[::1]:80/h"
    assert loggable_url("http://host:notaport/") == "(unparseable URL)"


def test_a_url_urlsplit_misreads_shows_no_part_of_its_user_info() -> None:
    # No scheme it accepts ('_'), no '//', or a '/' in the password: the user info lands in the path
    for url in ("sasl_ssl://bridge:hunter2@broker:9093", "bridge:hunter2@broker:9093", "hunter2@broker:9093",
                "redis://bridge:hun/ter2@redis.example:6379/0", "http://u:p@h/a@hunter2/x"):
        shown = loggable_url(url)
        assert "hunter2" not in shown and "ter2" not in shown, (url, shown)
    assert loggable_url("unix:///run/redis.sock") == "unix:///run/redis.sock"
