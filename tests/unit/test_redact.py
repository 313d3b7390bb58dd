"""Redaction: real secret shapes go, code that merely looks like secrets stays."""

from __future__ import annotations

import pytest

from engram.adapters.redact import redact_event, redact_text

SECRETS = [
    ("anthropic-key", "key sk-ant-api03-" + "Zx9_kQ2vLm8pR4tW7yB1nD6fH3jK5sA0cE2gI4oU6qY8" * 2 + "AbC"),
    ("aws-access-key", "aws AKIAIOSFODNN7EXAMPLF here"),
    ("github-token", "token ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    ("bearer-token", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9abc.def1234567890xyzQWERTY"),
    ("url-credentials", "git clone https://user:s3cr3tP4ssw0rd@github.com/org/repo.git"),
    ("env-secret", "export DATABASE_PASSWORD=Xk9v2LmQ8rT4wP1z"),
    ("private-key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn\n-----END RSA PRIVATE KEY-----"),
]


@pytest.mark.parametrize("kind,text", SECRETS)
def test_secrets_are_redacted(kind, text):
    out, n = redact_text(text)
    assert n == 1 and f"[REDACTED:{kind}]" in out


NOT_SECRETS = [
    "const fake = 'sk-ant-' + 'a'.repeat(95);",
    "apiKey: 'ollama'",
    "env.CODEMIE_API_KEY = apiKeyValue",
    "_rejectUnauthorized = rejectUnauthorizedDefault",
    "total_input_tokens: metric.attributes.total_input_tokens",
    "OPENAI_API_KEY=${OPENAI_API_KEY}",
    "password: <your-password>",
    "API_KEY=fake-api-key",
    "token = os.environ['GITHUB_TOKEN']",
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_code_that_looks_like_secrets_is_kept(text):
    assert redact_text(text) == (text, 0)


def test_redact_event_recomputes_edit_hashes():
    from engram.adapters.base import ev_edit
    from engram.digest import text_hash

    ev = ev_edit("t", "a.env", 1, "", 1, "STRIPE_SECRET_KEY=Q8r4Tz1Lm9Xv2Kp7\n")
    n = redact_event(ev)
    assert n == 1 and "[REDACTED:env-secret]" in ev["after_text"]
    assert ev["after_hash"] == text_hash(ev["after_text"])
