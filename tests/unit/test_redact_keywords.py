"""Redaction's keyword scan: the Aho-Corasick automaton (``ahocorasick_rs``, when installed) finds
exactly the keyword occurrences that the regex ``_KW_RX`` finds, so ``find_secrets`` gives the
same spans either way (the regex is what runs without the package)."""

from __future__ import annotations

import pytest

from engram.adapters import redact

_KW = list(redact._KEYWORDS)
_PIECES = _KW + [kw.upper() for kw in _KW] + [
    "Key", "ToKen", "PASSword", "Authorization", "author", "passed", "keys", "tokenizer", "assign", "_PAT",
    "api_key=", "DB_PASSWORD=", " = ", ": ", '"', "'", "\\\"", "\\n", "\n", " ", "=", "?", "&", "://",
    "user:pw@host", "Bearer ", "-----BEGIN RSA PRIVATE KEY-----", "ghp_", "sk-ant-api03-",
    "A" * 20, "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7", "0123456789abcdef" * 3, "→", "\t", "42→",
    "é", "😀", "\ud800", "İ", "\u212a", "\u212aey", "ſecret", "ǅ", "ß", "\u0130", "ẞ",
]


def _hits_both(text: str) -> tuple[list, list]:
    low = text.lower()
    if len(low) != len(text):
        low = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    saved = redact._KW_AC
    try:
        with_ac = sorted(redact._keyword_hits(low))
        redact._KW_AC = None
        with_rx = sorted(redact._keyword_hits(low))
    finally:
        redact._KW_AC = saved
    return with_ac, with_rx


def _spans_both(text: str) -> tuple[list, list]:
    saved = redact._KW_AC
    try:
        a = redact.find_secrets(text)
        redact._KW_AC = None
        b = redact.find_secrets(text)
    finally:
        redact._KW_AC = saved
    return a, b


needs_ac = pytest.mark.skipif(redact._KW_AC is None, reason="ahocorasick_rs not installed")


def test_regex_scan_finds_every_keyword_occurrence():
    # the fallback itself: every occurrence, overlapping ones too, at its start
    text = "xkeyytokenpass" + "patpwdauthcredsig" + "secretcookie" + "mysql://-----begin q~+acr"
    saved = redact._KW_AC
    redact._KW_AC = None
    try:
        hits = set(redact._keyword_hits(text))
    finally:
        redact._KW_AC = saved
    want = {(i, kw) for kw in _KW for i in range(len(text)) if text.startswith(kw, i)}
    assert hits == want
    assert (1, "key") in hits and (10, "pass") in hits and len(hits) == 15


@needs_ac
@pytest.mark.parametrize("text", [
    "", "key", "KEY", "keykey", "tokenkey", "secret_key=abc", "pAsSwOrD", "https://u:p@h", "-----BEGIN ",
    "\u212aey=1", "İtoken", "ſecret", "x→y key", "\ud800pass", "cookie: a=b", "access_token$production$",
    "Q~" + "a" * 40, ":APA91b", "fm2_", ".atlasv1.", "+ACR", "mysql -pS3cr3tpw", "curl -u a:b",
])
def test_automaton_and_regex_find_the_same_keywords(text):
    a, b = _hits_both(text)
    assert a == b


@needs_ac
def test_automaton_and_regex_agree_on_random_text():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=600, deadline=None, derandomize=True)
    @given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=6)), max_size=24))
    def check(parts):
        text = "".join(parts)
        a, b = _hits_both(text)
        assert a == b
        sa, sb = _spans_both(text)
        assert sa == sb

    check()


@needs_ac
def test_find_secrets_the_same_either_way_on_fixture_secrets():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "data" / "secrets"
    files = sorted(p for p in root.rglob("*") if p.is_file())
    assert files, "the secrets corpus is missing"
    found = 0
    for p in files:
        text = p.read_text("utf-8", errors="replace")
        a, b = _spans_both(text)
        assert a == b, p.name
        found += bool(a)
    assert found > 0
