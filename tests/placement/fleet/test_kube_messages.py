"""Issue 38: an API server's error text is untrusted: one printable line, no escape sequences, no credential."""

from __future__ import annotations

import json
from types import SimpleNamespace

from placement.fleet.kube import api_message


def test_an_api_servers_message_is_one_printable_line_without_credentials() -> None:
    body = json.dumps({"kind": "Status", "message": "denied \x1b[2J\x1b[31mred\x1b[0m \u202eevil at "
                                                    "https://u:s3cr3t@proxy/x\nsecond line"})
    got = api_message(SimpleNamespace(body=body, reason="Forbidden"))
    assert got == "denied red \\u202eevil at https://***@proxy/x"


def test_a_body_that_is_not_a_status_falls_back_to_the_reason() -> None:
    assert api_message(SimpleNamespace(body="[" * 100_000, reason="Bad\x07 Gateway")) == "Bad\\x07 Gateway"
