"""Secret redaction, applied to every event of every harness before a tape is written.

Redacts: provider API keys (OpenAI, Anthropic, AWS, Google, GitHub, GitLab, Slack, Hugging Face,
Stripe), bearer tokens, JWTs, PEM private keys, credentials inside URLs, and ``.env``-style
assignments whose name says secret (``API_KEY=...``, ``password: ...``). A value is replaced by
``[REDACTED:<kind>]``, so the tape records *that* something was removed and of what kind.

Calibrated against false positives seen in real logs: source code that *builds* fake keys
(``'sk-ant-' + 'a'.repeat(95)``), regexes describing keys, placeholders (``fake-api-key``,
``<your-key>``, ``${API_KEY}``), and values that are too short or too uniform to be secrets.
"""

from __future__ import annotations

import functools
import math
import re

from engram.digest import text_hash

_PLACEHOLDER = re.compile(
    r"^(?:x+|\*+|\.+|<[^>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%[A-Za-z_]+%|"
    r"(?:your|my|fake|dummy|example|test|sample|placeholder|changeme|redacted|xxx)[-_a-z0-9]*|"
    r"null|none|true|false|undefined|process\.env\..*|os\.environ.*)$",
    re.I,
)

# (kind, pattern). Group "v" (when present) is the part replaced; otherwise the whole match.
_TOKEN_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("private-key", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
    ("anthropic-key", re.compile(r"sk-ant-(?:api|admin)\d{2}-[A-Za-z0-9_\-]{80,}")),
    ("openai-key", re.compile(r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}T3BlbkFJ[A-Za-z0-9_\-]{20,}")),
    ("openai-key", re.compile(r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}")),
    ("aws-access-key", re.compile(r"(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("google-api-key", re.compile(r"AIza[0-9A-Za-z_\-]{35}\b")),
    ("github-token", re.compile(r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}\b")),
    ("github-token", re.compile(r"github_pat_[A-Za-z0-9_]{60,}\b")),
    ("gitlab-token", re.compile(r"glpat-[A-Za-z0-9_\-]{20,}\b")),
    ("slack-token", re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}\b")),
    ("huggingface-token", re.compile(r"hf_[A-Za-z0-9]{34,}\b")),
    ("stripe-key", re.compile(r"(?:sk|rk)_live_[A-Za-z0-9]{20,}\b")),
    ("jwt", re.compile(r"eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}")),
    ("bearer-token", re.compile(r"(?i)bearer\s+(?P<v>[A-Za-z0-9._~+/\-]{20,}=*)")),
    ("url-credentials", re.compile(r"://[^\s/:@\"']+:(?P<v>[^\s/@\"']{3,})@")),
]

# Literal triggers per pattern kind: one case-insensitive scan finds which patterns can match at all,
# so ordinary text (almost all of it) costs one regex pass instead of sixteen.
_TRIGGERS: dict[str, tuple[str, ...]] = {
    "private-key": ("private key",), "anthropic-key": ("sk-ant-",), "openai-key": ("sk-",),
    "aws-access-key": ("akia", "asia"), "google-api-key": ("aiza",),
    "github-token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), "gitlab-token": ("glpat-",),
    "slack-token": ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-"), "huggingface-token": ("hf_",),
    "stripe-key": ("_live_",), "jwt": ("eyj",), "bearer-token": ("bearer",), "url-credentials": ("://",),
    "env-secret": ("key", "secret", "token", "passw"),
}
_ALL_TRIGGERS = sorted({t for ts in _TRIGGERS.values() for t in ts})


def _any_of(words: list[str]) -> str:
    """A regex matching wherever any of ``words`` occurs. A word that contains another is left
    out (the shorter one matches wherever it would), the rest share the tests of their common
    prefixes (``_trie``)."""
    return _trie(sorted({w for w in words if not any(o != w and o in w for o in words)}))


def _trie(words: list[str]) -> str:
    """Alternation of ``words`` (sorted, none a prefix of another) grouped by first character."""
    by_first: dict[str, list[str]] = {}
    for w in words:
        by_first.setdefault(w[0], []).append(w[1:])
    alts = []
    for c, rests in by_first.items():
        if len(rests) == 1:
            alts.append(re.escape(c + rests[0]))
        else:  # several words go on after ``c``: none of them ends there
            alts.append(re.escape(c) + "(?:" + _trie(rests) + ")")
    return "|".join(alts)


# Whether a (lower-cased) text holds any trigger at all: most texts hold none, and one pass of this
# over them is a few times cheaper than looking for each trigger in turn
_ANY_TRIGGER = re.compile(_any_of(_ALL_TRIGGERS))

# Anchored on the keyword itself (no leading name class to backtrack over at every word start):
# the part of the name before the keyword is never replaced, so it need not be matched.
_ASSIGN = re.compile(
    r"(?i)(?P<name>(?:API_?KEY|SECRET|TOKEN|PASSWORD|PASSWD|PRIVATE_KEY|ACCESS_KEY)[A-Z0-9_]*)"
    r"(?P<sep>\s*[=:]\s*)(?P<q>[\"']?)(?P<v>[^\s\"'#,;)]{8,})(?P=q)"
)


_ASSIGN_KEYWORDS = ("api_key", "apikey", "secret", "token", "password", "passwd", "private_key",
                    "access_key")


def _find_all(haystack: str, needle: str):
    i = haystack.find(needle)
    while i >= 0:
        yield i
        i = haystack.find(needle, i + 1)


def _entropy(s: str) -> float:
    if not s:
        return 0.0
    counts: dict[str, int] = {}
    for ch in s:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


# `metric.attrs.total_tokens`: a digit-free dotted identifier path is code, not a credential
_CODE_REF = re.compile(r"^[A-Za-z_$][A-Za-z_$]*(?:\.[A-Za-z_$][A-Za-z_$]*)+$")
_PATTERNISH = re.compile(r"[`\[\]{}()\\]")  # regex / markdown describing a key, a call expression


def _looks_secret(value: str) -> bool:
    if _PLACEHOLDER.match(value):
        return False
    if _CODE_REF.match(value) or _PATTERNISH.search(value):
        return False  # source code (`tokens: d.tokens`) or a description (`[base64].[base64]`)
    if len(set(value)) <= 3:  # 'aaaa…', '0000…'
        return False
    if not re.search(r"\d", value) and value.isalpha() and value.lower() == value:
        return False  # a plain word
    return _entropy(value) >= 3.0


_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z_$-]*$")


def _assigned_secret(value: str) -> bool:
    """Extra bar for ``NAME=value`` assignments, whose names match code as often as secrets:
    a value made only of letters, ``_`` and ``-`` is an identifier (``apiKeyValue``,
    ``proxy-handled``, ``REDACTED_API_KEY``), not a secret, unless it is long and random-looking."""
    if _IDENTIFIER.match(value):
        return len(value) >= 24 and _entropy(value) >= 4.0 and not re.search(r"[a-z][A-Z]|_[A-Za-z]", value)
    return True


def redact_text(text: str) -> tuple[str, int]:
    """Return ``(redacted_text, count)``. Harness logs repeat the same texts (whole files re-read,
    tool output echoed): results for long texts are memoised."""
    if not text or len(text) < 8:
        return text, 0
    if len(text) >= 256:
        return _redact_cached(text)
    return _redact(text)


@functools.lru_cache(maxsize=2048)
def _redact_cached(text: str) -> tuple[str, int]:
    return _redact(text)


def _redact(text: str) -> tuple[str, int]:
    count = 0

    def sub_token(kind: str):
        def repl(m: re.Match[str]) -> str:
            nonlocal count
            st = m.start()
            if kind not in ("url-credentials", "private-key") and st > 0 and (
                    m.string[st - 1].isalnum() or m.string[st - 1] == "_"):
                return m.group(0)  # inside a longer word: not a token boundary
            if "v" in m.groupdict() and m.group("v") is not None:
                v = m.group("v")
                if not _looks_secret(v):
                    return m.group(0)
                count += 1
                s, e = m.span("v")
                s -= m.start()
                e -= m.start()
                whole = m.group(0)
                return whole[:s] + f"[REDACTED:{kind}]" + whole[e:]
            whole = m.group(0)
            if kind != "private-key" and not _looks_secret(whole):
                return whole
            count += 1
            return f"[REDACTED:{kind}]"
        return repl

    low = text.lower()
    if not _ANY_TRIGGER.search(low):
        return text, 0
    found = {t for t in _ALL_TRIGGERS if t in low}
    for kind, rx in _TOKEN_PATTERNS:
        if not any(t in found for t in _TRIGGERS[kind]):
            continue
        text = rx.sub(sub_token(kind), text)
    if not any(t in found for t in _TRIGGERS["env-secret"]):
        return text, count

    def sub_assign(m: re.Match[str]) -> str:
        nonlocal count
        v = m.group("v")
        if v.startswith("[REDACTED") or not _looks_secret(v) or not _assigned_secret(v):
            return m.group(0)
        count += 1
        return f"{m.group('name')}{m.group('sep')}{m.group('q')}[REDACTED:env-secret]{m.group('q')}"

    # only try the assignment pattern where a keyword actually starts
    low = text.lower()
    starts = sorted({i for kw in _ASSIGN_KEYWORDS for i in _find_all(low, kw)})
    if not starts:
        return text, count
    out, last = [], 0
    for i in starts:
        if i < last:
            continue
        m = _ASSIGN.match(text, i)
        if m is None:
            continue
        out.append(text[last:i])
        out.append(sub_assign(m))
        last = m.end()
    out.append(text[last:])
    return "".join(out), count


def redact_value(value):
    """Redact strings anywhere inside a JSON-like value. Returns ``(new_value, count)``."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        total = 0
        out = []
        for v in value:
            nv, c = redact_value(v)
            total += c
            out.append(nv)
        return out, total
    if isinstance(value, dict):
        total = 0
        out = {}
        for k, v in value.items():
            nv, c = redact_value(v)
            total += c
            out[k] = nv
        return out, total
    return value, 0


_SKIP_KEYS = {"k", "t", "before_hash", "after_hash", "call_id", "session", "tape_id", "harness",
              "adapter", "adapter_version", "coverage", "range", "before_range", "after_range"}


def redact_event(ev: dict) -> int:
    """Redact one event in place; returns the number of secrets removed.

    ``before_hash``/``after_hash`` are recomputed when the texts they hash change.
    """
    total = 0
    for key in list(ev.keys()):
        if key in _SKIP_KEYS:
            continue
        nv, c = redact_value(ev[key])
        if c:
            ev[key] = nv
            total += c
    if total and ev.get("k") == "code.edit":

        ev["before_hash"] = text_hash(ev.get("before_text") or "")
        ev["after_hash"] = text_hash(ev.get("after_text") or "")
    return total
