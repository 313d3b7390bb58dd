"""Redaction: real secret shapes go, code and configuration that merely look like secrets stay.

The recall and false-positive *figures* come from the corpus (test_redact_corpus.py); the cases
here are written by hand, one per family the issue named, so a failure says what broke.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from engram.adapters.redact import RULES, find_secrets, redact_event, redact_text, rules_markdown

ROOT = Path(__file__).resolve().parents[2]

# (rule, text, the secret that must go). Written by hand, not from the corpus templates.
SECRETS = [
    ("anthropic-key", "key sk-ant-api03-" + "Zx9_kQ2vLm8pR4tW7yB1nD6fH3jK5sA0cE2gI4oU6qY8" * 2 + "AbC",
     "Zx9_kQ2vLm8pR4tW"),
    ("aws-access-key", "aws AKIAIOSFODNN7EXAMPLF here", "IOSFODNN7EXAMPLF"),
    ("github-token", "token ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "a1B2c3D4e5F6"),
    ("bearer-token", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9abc.def1234567890xyzQWERTY", "def1234567890"),
    ("url-credentials", "git clone https://user:s3cr3tP4ssw0rd@github.com/org/repo.git", "s3cr3tP4ssw0rd"),
    ("password", "export DATABASE_PASSWORD=Xk9v2LmQ8rT4wP1z", "Xk9v2LmQ8rT4wP1z"),
    ("private-key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn\n-----END RSA PRIVATE KEY-----",
     "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn"),
    # JSON-quoted keys
    ("password", '{"user": "svc", "password": "Tr0ub4dor&3x-9"}', "Tr0ub4dor&3x-9"),
    ("secret", '{"AccessKeyId": "ASIAJ3X", "SecretAccessKey": "q9Xk2LmNo+wJalrXUtnFEMIK7MDENGbPxRfiCYzT"}',
     "q9Xk2LmNo+wJalrX"),
    ("secret", r'printf "{\"api_key\": \"c81d4e2f9b7a4b6c8d0e1f2a3b4c5d6e\"}"', "c81d4e2f9b7a4b6c"),
    # values containing '#'
    ("password", "SMTP_PASSWORD=ab#cd#1234xyz", "ab#cd#1234xyz"),
    # Django-style settings with brackets
    ("password", "DATABASES['default']['PASSWORD'] = 'p4ss#W0rd-2024'", "p4ss#W0rd-2024"),
    # connection strings
    ("secret", "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=PtYgjmUhBel31iEl2hpChYgCfrL1spNxnyVmihA/2O76"
     "UMFxFkM/R5Kjp1vRt+1fjORS/6ilI8ihN5KXSc7Tvo==;EndpointSuffix=core.windows.net", "l31iEl2hpChYgCfr"),
    ("secret", "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=Root;"
     "SharedAccessKey=k2Jd9vQ0xLmN4pR7sT1uW5yA8bC3eF6gH0iJ2kL4mN8=", "k2Jd9vQ0xLmN4pR7"),
    ("signature", "https://acme.blob.core.windows.net/c/f?sv=2022-11-02&sp=r&se=2026-01-01&"
     "sig=AbC9dEf0GhI1jKl2MnO3pQr4StU5vWx6YzA7bCd8EfG%3D", "AbC9dEf0GhI1jKl2"),
    ("password", "Server=tcp:db.windows.net,1433;User ID=sa;Password=Pa55w0rd!x;Encrypt=True",
     "Pa55w0rd!x"),
    # webhook URLs
    ("webhook-url", "curl -X POST https://hooks.slack.com/services/T0AB12CD3/B0EF45GH6/aBcDeFgHiJkLmNoPqRsTuVwX",
     "aBcDeFgHiJkLmNoPqRsTuVwX"),
    ("webhook-url", "DISCORD=https://discord.com/api/webhooks/123456789012345678/" + "AbCdEf0123456789" * 4 + "wxyz",
     "AbCdEf0123456789"),
    ("webhook-url", "https://acme.webhook.office.com/webhookb2/1b2c3d4e-0000-4000-8000-000000000001@"
     "2c3d4e5f-0000-4000-8000-000000000002/IncomingWebhook/9f8e7d6c5b4a39281706f5e4d3c2b1a0/"
     "3d4e5f6a-0000-4000-8000-000000000003", "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    # provider tokens without a KEY= prefix
    ("sendgrid-key", "use 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 for mail",
     "tjfIZ4SOcMz9CPVN"),
    ("npm-token", "//registry.npmjs.org/:_authToken=npm_QfDPrAJ71fTquWoGsbeKXgzg2sye9b2Rann7",
     "QfDPrAJ71fTquWoG"),
    ("pypi-token", "twine upload -p pypi-AgEIcHlwaS5vcmcCJDg4" + "x7Yq9Zr2" * 8 + " dist/*", "x7Yq9Zr2x7Yq9Zr2"),
    ("twilio-key", "key SK1fccd268a29a0d347301ef56e64dc3cd in the console", "1fccd268a29a0d34"),
    ("telegram-token", "bot 7123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1 is live", "AAHdqTcvCH1vGWJx"),
    ("digitalocean-token", "doctl auth init -t dop_v1_6089065c3146e80a9c222670bbe4f4c54977656cf2d133187c8df95247f28660",
     "6089065c3146e80a"),
    ("mailgun-key", "MG: key-28de71159b42b4ea410fb9102f29a422", "28de71159b42b4ea"),
    ("google-oauth", "client secret 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 ok", "aB3dE5fG7hJ9kL1m"),
    ("google-oauth", "token ya29.a0AfB_byC3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9f", "a0AfB_byC3dE5fG7"),
    # private keys cut short, PGP
    ("private-key", "$ head -3 id_ed25519\n-----BEGIN OPENSSH PRIVATE KEY-----\n"
     "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
     "QyNTUxOQAAACB0Z3VzNUpKY2RzM3hmbjB0Z3VzNUpKY2RzM3hmbgAAAJhDZXJ0aWZp", "QyNTUxOQAAACB0Z3Vz"),
    ("private-key", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQdGBGVhZmFrZQEQAKx1b2dvbm5hZ2l2ZXlv\n"
     "dXVwbmV2ZXJnb25uYWxldHlvdWRvd24K\n=k2Jd\n-----END PGP PRIVATE KEY BLOCK-----", "lQdGBGVhZmFrZQEQ"),
    ("private-key", '{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n'
     'BKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\\n-----END PRIVATE KEY-----\\n"}', "MIIEvQIBADANBgkq"),
    # headers, redis, curl
    ("secret", 'curl https://api.acme.dev/v1 -H "x-api-key: 3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"', "3f9a8b7c6d5e4f3a"),
    ("url-credentials", "REDIS_URL=redis://:Kq93mZx81LpWv@cache.internal:6379/0", "Kq93mZx81LpWv"),
    ("curl-user", "curl -u admin:H4rdT0Gu3ss! https://jenkins.acme.dev/api/json", "H4rdT0Gu3ss!"),
    # the rest of the families
    ("url-credentials", "mysql://root:r00tPa55@db:3306/app", "r00tPa55"),
    ("cli-password", "mysql -h db -u root -pr00t-Pa55w0rd app", "r00t-Pa55w0rd"),
    ("password", "machine api.heroku.com login me@acme.dev password 0123abcd-4567-89ef-0123-456789abcdef",
     "0123abcd-4567-89ef"),
    ("password", "docker login ghcr.io -u ci --password Qw3rty!2024x", "Qw3rty!2024x"),
    ("password", "<settings><password>S3cr3t!Value9</password></settings>", "S3cr3t!Value9"),
    ("cookie", "< Set-Cookie: sessionid=q8Xk2LmN4pR7sT1uW5yA8bC3eF6gH0iJ; Path=/; HttpOnly", "q8Xk2LmN4pR7sT1u"),
    ("jwt", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "dozjgNryP4J3jVmN"),
    ("stripe-key", "stripe.api_key = 'sk_live_CIxVc57VVTiY96vwfRE5e32A8Yb3FKaNQyyLaMef'", "CIxVc57VVTiY96vw"),
    ("secret", "GITHUB_PAT=4k2jd9vq0xlmn4pr7st1uw5ya8bc3ef6gh0ij2kl4mn8op1qr", "4k2jd9vq0xlmn4pr"),
    # set by a command, a value after a space
    ("secret", "aws configure set aws_secret_access_key q9Xk2LmNowJalrXUtnFEMIK7MDENGbPxRfiCYzT0", "q9Xk2LmNowJalrXU"),
    ("secret", "npm config set //registry.npmjs.org/:_authToken 0f3a9c1e-7b2d-4e8f-9a6b-2c1d0e3f4a5b", "0f3a9c1e-7b2d"),
    ("password", "psql -c \"CREATE ROLE app WITH LOGIN PASSWORD 'S3cr3t!pw9'\"", "S3cr3t!pw9"),
    ("password", 'PGPASSWORD="hq8#Lx2!pz" psql -h db.internal -U app', "hq8#Lx2!pz"),
]


@pytest.mark.parametrize("rule,text,secret", SECRETS, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(SECRETS)])
def test_secrets_are_redacted(rule, text, secret):
    out, n = redact_text(text)
    assert n >= 1 and f"[REDACTED:{rule}]" in out, out
    assert secret not in out


def test_one_secret_found_twice_counts_once():
    # the header rule and the bearer rule both find this token: one redaction
    out, n = redact_text("curl -H 'Authorization: Bearer eyQ9fAk3LmZ0pR7sT2vW8xY1bC4dE6gH' https://x.dev")
    assert n == 1 and out == "curl -H 'Authorization: Bearer [REDACTED:bearer-token]' https://x.dev"


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
    # the false positives: the name says token/secret/password, the value is not one
    "token_endpoint: https://login.example.com/oauth2/v2.0/token",
    "secret_name: prod/db/credentials",
    "tokenizer: bert-base-uncased",
    "password_min_length: 12",
    # and the code that describes them
    "authorization = self.headers.get('authorization')",
    "session_secret = (constants.OAUTH_CLIENT_SECRET or '') + '-v1'",
    "tok = re.findall('token=([a-z0-9]+)', url)[0]",
    "info = api.repo_info(repo_id=repo_id, token=token).sha",
    "_HEX_PAT = '[0-9A-Fa-f]{1,4}'",
    'proxy_url="socks5h://<username>:<password>@proxy-host"',
    "# First pass: decided_mask==0, every element",
    "def __init__(self, passwd=None):",
    'publicKeyToken="1fc8b3b9a1e18e3b"',
    "x = SecretAccessKey\ny = SecretAccessKey",
    "https://jo%40email.com:a%20secret@example.com:1234/",
    "raise ValueError(\"Cannot pass 'force_download=True' when offline\")",
    "By default it returns a string. Pass `details=True` if you want more.",
    "set password for the user",
    "the result set pass `evaluate=True` to give L - R",
    "ARN=arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf",
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_code_and_config_that_look_like_secrets_are_kept(text):
    assert redact_text(text) == (text, 0)


def test_redaction_is_idempotent():
    for _, text, _ in SECRETS:
        once, _ = redact_text(text)
        assert redact_text(once) == (once, 0), once


def test_find_secrets_gives_spans_and_rules():
    text = "a=1 GITHUB_TOKEN=ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8" + " b=2"
    [(s, e, rule)] = find_secrets(text)
    assert text[s:e].startswith("ghp_") and rule == "github-token"  # the specific rule names the span


def test_redact_event_recomputes_edit_hashes():
    from engram.adapters.base import ev_edit
    from engram.digest import text_hash

    ev = ev_edit("t", "a.env", 1, "", 1, "STRIPE_SECRET_KEY=Q8r4Tz1Lm9Xv2Kp7\n")
    n = redact_event(ev)
    assert n == 1 and "[REDACTED:secret]" in ev["after_text"]
    assert ev["after_hash"] == text_hash(ev["after_text"])


# --------------------------------------------------------------------------------------------
# Labels: redacted before they are cut

KEY = "sk-ant-api03-" + "Zx9_kQ2vLm8pR4tW7yB1nD6fH3jK5sA0cE2gI4oU6qY8" * 2 + "AbC"


@pytest.mark.parametrize("lead", [0, 40, 60, 70, 78])
def test_label_never_holds_part_of_a_secret(lead):
    from engram.adapters.base import LABEL_MAX, label_of

    label = label_of("x" * lead + " " + KEY + " and then more words after it")
    assert len(label) <= LABEL_MAX
    assert not any(KEY[i:i + 6] in label for i in range(8, len(KEY) - 6)), label
    assert "[REDACTED:" not in label or "]" in label[label.index("[REDACTED:"):]  # no half marker


def test_a_label_cut_before_redaction_is_made_again():
    """An adapter (or ``engram record``) that cut the label itself: finish_session remakes it."""
    from engram.adapters.base import LABEL_MAX, finish_session

    first = "Could you check why the deploy fails since I set " + KEY + " in the environment?"
    cut = " ".join(first.split())[: LABEL_MAX - 1] + "…"
    evs = finish_session([{"t": "t", "k": "meta", "label": cut},
                          {"t": "t", "k": "msg.in", "text": first}])
    assert KEY[13:40] not in evs[0]["label"] and KEY[13:20] not in evs[0]["label"]
    assert evs[0]["label"].startswith("Could you check why the deploy fails")


# --------------------------------------------------------------------------------------------
# Speed: no catastrophic backtracking, whatever the text

PATHOLOGICAL = ["a", "=", " ", "key=", "password: ", "token=a", ":", "@", "://", "a:b@", "://a:", "sk-", "A",
                "eyJhbGciOiJIUzI1NiJ9.", "-----BEGIN PRIVATE KEY-----", "     1→KEY=", '"password": "',
                "curl -u ", "Bearer ", "Authorization: ", "QUJDREVGR0hJSktMTU5PUFFS", "0123456789abcdef",
                "the secret token key password api auth "]


def _time(text: str) -> float:
    from engram.adapters import redact

    t0 = time.process_time()
    redact._redact(text)
    return time.process_time() - t0


@pytest.mark.parametrize("unit", PATHOLOGICAL)
def test_a_megabyte_of_one_pattern_takes_linear_time(unit):
    small = _time(unit * (250_000 // len(unit)))
    big = _time(unit * (1_000_000 // len(unit)))
    # quadratic would be 16x; a loaded machine may double a timing, not multiply it by 5
    assert big < 10.0 and big < 8 * small + 0.5, (unit, small, big)


# --------------------------------------------------------------------------------------------
# The rule table in docs/security.md is generated from the rules


def test_docs_list_every_rule(update_golden):
    doc = ROOT / "docs" / "security.md"
    text = doc.read_text(encoding="utf-8")
    begin, end = "<!-- rules: generated by engram.adapters.redact.rules_markdown() -->\n", "<!-- rules end -->"
    assert begin in text and end in text
    head, rest = text.split(begin, 1)
    table, tail = rest.split(end, 1)
    if update_golden and table != rules_markdown():
        doc.write_text(head + begin + rules_markdown() + end + tail, encoding="utf-8")
        return
    assert table == rules_markdown(), "docs/security.md: rule table out of date (pytest --update-golden)"
    assert set(re.findall(r"^\| `([a-z0-9-]+)` \|", table, re.M)) == set(RULES)


def test_engram_record_labels_hold_no_part_of_a_secret():
    """``engram record`` cuts its labels itself (engram/ingest/record.py): remade before redaction."""
    from engram.ingest.record import record_stdin

    evs = record_stdin("user: Could you check why the deploy fails since I set " + KEY + " in the env?\n")
    assert KEY[13:20] not in evs[0]["label"] and KEY[30:37] not in evs[0]["label"]
    assert KEY[13:20] not in evs[1]["text"]


_RUN16_RX = re.compile(r"[^A-Za-z0-9_\-.][A-Za-z0-9_\-.]{16}")   # what ``_run_starts`` replaces


def _run_starts_by_regex(text: str) -> list[int]:
    starts = [m.start() + 1 for m in _RUN16_RX.finditer(text)]
    return ([0] if re.match(r"[A-Za-z0-9_\-.]{16}", text) else []) + starts


@pytest.mark.parametrize("text", [
    "", "a" * 15, "a" * 16, "a" * 40, " " + "a" * 16, "x" * 16 + " " + "y" * 15 + "-" + "z" * 17,
    "é" + "b" * 16 + "ü" + "c" * 20, "\ud800" + "k" * 16, "😀" * 3 + "ghp_" + "A" * 36 + "😀",
    "a" * 16 + "\n" + "b" * 16 + "\\n" + "c" * 16, ".-_" * 8 + "?" + "0123456789" * 2,
    "İ" + "q" * 18 + "K" + "r" * 16,
])
def test_run_starts_are_those_of_the_regex(text):
    from engram.adapters.redact import _run_starts

    assert _run_starts(text) == _run_starts_by_regex(text)


def test_run_starts_are_those_of_the_regex_on_random_text():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from engram.adapters.redact import _run_starts

    alphabet = st.sampled_from(list("aZ09_-.") + [" ", "\n", "\\", "?", "é", "😀", "\ud800", "İ"])

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(st.lists(st.tuples(alphabet, st.integers(1, 24)), max_size=12))
    def check(parts):
        text = "".join(c * n for c, n in parts)
        assert _run_starts(text) == _run_starts_by_regex(text)

    check()
