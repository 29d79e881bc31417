"""Texts as log lines quote them: bounded, and unable to start a line of their own."""

from streams.sizes import short


def test_a_quoted_text_cannot_forge_a_log_line() -> None:
    # a hand-written job id (a raw XADD into the results stream), a request path, an agent's error
    forged = "x\n2026-12-07 08:00:00,000 WARNING streamcrew.notifier FORGED\r\x1b[2J\u202egnp.exe"
    quoted = short(forged)
    assert "\n" not in quoted and "\r" not in quoted and "\x1b" not in quoted and "\u202e" not in quoted
    assert quoted.startswith("x\\n2026-12-07") and "\\x1b" in quoted and "\\u202e" in quoted


def test_a_printable_text_is_kept_and_a_long_one_cut() -> None:
    assert short("job-42 failed: Ünïcode is fine") == "job-42 failed: Ünïcode is fine"
    assert short("a" * 500, 10) == "a" * 10 + "..."
    assert short(None) == ""
