"""The relay's side of context editing: its flags, the header it sends, and what it reads
back from the gateway's `Toolref-Context` into its turn lines and `Toolref-Savings`."""

from __future__ import annotations

import pytest

from toolref_relay.cli import config_of, parser
from toolref_relay.headers import toolref_headers
from toolref_relay.ledger import Context, Tally, Upload, Who, context_of, savings_header, turn_line


@pytest.mark.parametrize(
    ("flags", "wanted", "header"),
    [
        ([], None, None),
        (["--context-editing"], True, "on"),
        (["--no-context-editing"], False, "off"),
    ],
)
def test_the_flags_ask_refuse_or_leave_it_to_the_gateway(
    flags: list[str], wanted: bool | None, header: str | None
) -> None:
    config = config_of(parser().parse_args(["relay", "--gateway", "http://127.0.0.1:1", *flags]))
    assert config.context_editing is wanted
    sent = dict(toolref_headers("k", None, config.context_editing))
    assert sent.get("Toolref-Context-Editing") == header


def test_both_flags_at_once_are_refused() -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["relay", "--context-editing", "--no-context-editing"])


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("cleared=3; batches=1; rewrote=1; tokens=9000; saved=4200", Context(3, 4200, True)),
        ("cleared=0; batches=0; rewrote=0; tokens=10; saved=0", Context(0, 0, False)),
        (None, None),
        ("", None),
        ("saved=12", None),
        ("cleared=x; saved=1", None),
        ("cleared=1; saved=" + "9" * 40, None),  # no number of any length is read
        ("cleared=1; saved=\u00b2", None),  # a digit only to str.isdigit
    ],
)
def test_the_gateway_s_header_is_read_or_ignored(value: str | None, found: Context | None) -> None:
    assert context_of(value) == found


def test_the_turn_line_and_the_savings_tell_the_tokens_saved() -> None:
    upload = Upload(10_000, 10_000, 700, context=Context(3, 4200, True))
    tally = Tally()
    tally.add(upload)
    line = turn_line(Who("claude-cli", "anthropic"), 1, upload, tally)
    assert "3 old results summarized, ~4200 tokens saved" in line
    assert "cache written again" in line
    assert "~4200 input tokens saved" in line  # the conversation's total
    assert savings_header(upload).endswith("tokens-saved=4200")
    plain = Upload(10_000, 10_000, 700)
    assert "context" not in turn_line(Who("a", "b"), 2, plain, tally)
    assert "tokens-saved" not in savings_header(plain)
