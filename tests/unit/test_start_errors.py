"""Starting toolref wrong, the parts a subprocess need not run for (review: starting it
wrong): each mistake one message naming the setting, the value and the fix, no traceback."""

from __future__ import annotations

import errno

import pytest

from toolref.wire.errors import ConfigurationError
from toolref_relay import cli as relay_cli
from toolref_server import cli
from toolref_server.settings.upstreams import parse_upstreams


def test_an_upstream_url_with_an_unclosed_ipv6_host_names_the_fix() -> None:
    """`TOOLREF_UPSTREAMS=a=https://[::1` said `Invalid IPv6 URL` (urllib's ValueError)
    and no more; now the refusal every other bad base URL gets, with an example."""
    with pytest.raises(ConfigurationError) as refused:
        parse_upstreams("a=https://[::1")
    assert "TOOLREF_UPSTREAMS gives 'a' the base URL 'https://[::1'" in refused.value.detail
    assert "such as https://api.anthropic.com" in refused.value.detail


def test_an_os_or_value_error_no_check_foresaw_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The one place the command turns what escaped every check into a line: before it,
    an OSError or ValueError from a library ended `toolref-server` in a traceback."""

    def full_disk(args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", "/srv/export.bin")

    monkeypatch.setattr(cli, "_cache", full_disk)
    assert cli.main(["cache", "export", "/srv/export.bin"]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1, said
    assert said.startswith("toolref-server: [Errno 28] No space left on device")
    assert "(OSError)" in said
    assert "--help" in said


@pytest.mark.parametrize(
    ("host", "said"),
    [
        ("no-such-host.invalid", "--host names no address; give one such as 127.0.0.1"),
        ("192.0.2.1", "no address of this machine: give --host 127.0.0.1"),
    ],
)
def test_a_relay_host_it_cannot_listen_on_is_named_with_the_fix(host: str, said: str) -> None:
    """`toolref relay --host no-such-host.invalid` said `cannot listen on ... (Name or
    service not known)` and nothing of what to do."""
    with pytest.raises(SystemExit) as stopped:
        relay_cli.main(["relay", "--gateway", "http://127.0.0.1:9", "--host", host, "--port", "0"])
    message = str(stopped.value.code)
    assert message.startswith(f"toolref relay: cannot listen on {host}:0 (")
    assert said in message
