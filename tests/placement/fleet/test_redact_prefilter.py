"""redact's prefilter (a shape skipped when the text cannot hold its literals) masks exactly what every shape applied
to every text masks: credentials in every case, unicode case folding, at the text's edges, after another mask."""

from __future__ import annotations

import random
from typing import Any

import pytest

from placement.fleet import redact as R


def slow_redact(text: Any) -> str:
    """redact without the prefilter: the known secrets, then every shape on every text."""
    out = text if isinstance(text, str) else str(text)
    if R._known_re is not None:
        out = R._known_re.sub(R.MASK, out)
    for i, shape in enumerate(R._SHAPES):
        if i == 1:
            out = shape.sub(lambda m: m.group(1) + m.group(2) + R.MASK, out)
        elif i == 3:
            out = shape.sub(lambda m: m.group(1) + R.MASK, out)
        else:
            out = shape.sub(R.MASK, out)
    return out


B64 = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY3ODk="
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJlLXRleHQ"
SECRET_FIELDS = ("token", "id-token", "access_token", "password", "passwd", "secret", "client-key-data",
                 "client-certificate-data", "certificate-authority-data", "api_key", "api-key", "apikey",
                 "private_key", "private-key", "privatekey")
HEADERS = ("Authorization", "proxy-authorization", "X-Auth-Token", "cookie", "Set-Cookie")
EXAMPLES = [
    "", "ValueError: quantity '1e400' is not a finite, non-negative quantity",
    "AttributeError: 'str' object has no attribute 'get'", "invalid literal for int() with base 10: 'high'",
    "-----BEGIN PRIVATE KEY-----\nMIIEv\n-----END PRIVATE KEY-----", "-----BEGIN CERTIFICATE-----abc",
    "-----begin certificate-----abc", f"token {JWT}", JWT, f"x{JWT}", B64, f"data={B64[:40]}", B64[:39],
    "Authorization: Bearer abc.def", 'authorization="Basic dXNlcjpwYXNz"', "AUTHORIZATION = bearer zzz",
    "bearer abcd", "Bearer   xyz123", "BASIC abcd", "basically nothing", "cookie=session=1", "Set-Cookie: a=b",
    '{"password": "hunter22"}', "passwd=abc", "'secret':'s3'", "client-key-data: LS0tLS1", "api_key=k",
    "PRIVATE_KEY: k", "X-AUTH-TOKEN: t", "Token:x", "tOkEn = y", "a token without a value", "key: value",
    "ſecret: x", "paſsword=x", "baſic abcdef", "toKen: x", "\u212a: x", "tokİn: x", "ıd-token: x",
    "authorızation: x", "privateſkey: x", "ſet-cookie: a", "BEARER\u00a0abcdef", "bearer\tabcdef", "é token: x",
    "password:", "=secret=", ":token:", "secret", "token", "[redacted]", "da[redacted]ta: x",
]


def _case(rng: random.Random, s: str) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in s)


def _fuzz(n: int) -> list[str]:
    rng = random.Random(33)
    parts = [*SECRET_FIELDS, *HEADERS, "bearer", "basic", "-----BEGIN X-----", "-----END X-----", "eyJ", JWT, B64,
             B64[:40], B64[:39], ": ", "=", '"', "'", " ", "\t", "\n", ",", "}", "{", "abcdef", "ok", "ſ", "\u212a",
             "İ", "ı", "é", "[redacted]", "to", "ken", "da", "ta", "pass", "word"]
    out = []
    for _ in range(n):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(1, 8)))
        out.append(_case(rng, text) if rng.random() < 0.5 else text)
    return out


def _variants() -> list[str]:
    rng = random.Random(7)
    texts = list(EXAMPLES)
    for field in (*SECRET_FIELDS, *HEADERS):
        for sep in (": ", "=", '": "', "':'", " = "):
            for value in ("abc123", "Bearer abc", JWT, "x"):
                for name in (field, field.upper(), _case(rng, field)):
                    body = f"{name}{sep}{value}"
                    texts += [body, f"ValueError: {body}", f"{body} and more", f'{{"{name}{sep[1:]}{value}"}}']
    return texts


@pytest.mark.parametrize("texts", [_variants(), _fuzz(4000)], ids=["variants", "fuzz"])
def test_prefilter_masks_what_every_shape_masks(texts: list[str]) -> None:
    wrong = [(t, R.redact(t), slow_redact(t)) for t in texts if R.redact(t) != slow_redact(t)]
    assert not wrong, wrong[:5]


def test_prefilter_with_known_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "_known", set())
    monkeypatch.setattr(R, "_known_re", None)
    R.remember("s3cr3t-value", "ſtoken-ſecret")
    texts = [*EXAMPLES, "ValueError: s3cr3t-value", "x s3cr3t-value: y", "ſtoken-ſecret", "password=s3cr3t-value",
             *_fuzz(500)]
    wrong = [(t, R.redact(t), slow_redact(t)) for t in texts if R.redact(t) != slow_redact(t)]
    assert not wrong, wrong[:5]
    assert "s3cr3t-value" not in R.redact("ValueError: s3cr3t-value")


def test_prefilter_skips_shapes_on_an_error_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of it: an ordinary error text runs only the shapes without a literal (the base64 run)."""
    ran = []

    class Spy:
        def __init__(self, i: int, shape: Any) -> None:
            self.i, self.shape = i, shape

        def sub(self, repl: Any, text: str) -> str:
            ran.append(self.i)
            return str(self.shape.sub(repl, text))

    monkeypatch.setattr(R, "_SHAPES", tuple(Spy(i, s) for i, s in enumerate(R._SHAPES)))
    assert R.redact("ValueError: invalid literal for int() with base 10: 'lots'") == (
        "ValueError: invalid literal for int() with base 10: 'lots'")
    assert ran == [5]
    ran.clear()
    R.redact("ValueError: ſ 'lots'")  # not ASCII: every shape
    assert ran == [0, 1, 2, 3, 4, 5]
