"""Secret redaction, applied to every event of every harness before a tape is written.

A secret is replaced by ``[REDACTED:<rule>]``, so the tape records *that* something was removed
and which rule removed it. ``RULES`` lists the rules (``rules_markdown()`` renders them for
docs/security.md); ``find_secrets(text)`` gives the spans a text would lose.

Three ways a secret is found, each cheap on text that has none (redaction runs on every event of
gigabytes of logs, so nothing here scans a text once per rule):

* **Tokens with a shape of their own** (``ghp_…``, ``sk-ant-…``, ``AKIA…``, ``xoxb-…``, JWTs, ...):
  one pass (``bytes.find`` over a copy of the text that marks token characters) finds the runs
  of at least 16 token characters; a run's first two characters pick
  the few token rules that can start there (``_TOKEN_TABLE``), and only those are tried, anchored.
  A handful of formats whose distinctive part sits in the middle (``…Q~…``, ``…+ACR…``) are found
  by that literal (``_PIVOT_TABLE``), in the keyword pass below.
* **Values named as secrets**: wherever a keyword occurs (``key``, ``secret``, ``token``, ``pass``,
  ``pwd``, ``auth``, ``cred``, ``sig``, ``pat``; one regex pass over the lower-cased text, which
  stops only at each keyword's rarest letter), the whole name around it is read and judged
  (``token_endpoint`` and ``secret_name`` are not secret names, ``SecretAccessKey`` and
  ``X-API-Key`` are), then the value after ``=``, ``:``, ``=>`` or ``>`` (quoted, JSON-escaped,
  in brackets, in a URL query or a connection string) is judged by the kind of name: a password
  may be short and human, a key must look random.
* **Structures**: private-key blocks (also cut short, JSON-escaped or under line-number gutters),
  credentials in URLs and webhook URLs, ``Authorization``/``Bearer``/``Cookie`` headers,
  ``curl -u``, ``mysql -p``/``sshpass -p``, ``.netrc`` and ``… config set NAME VALUE`` lines.

Calibrated against false positives in real logs and real code: source code that *builds* or
*describes* keys (``'sk-ant-' + 'a'.repeat(95)``, regexes), placeholders (``${API_KEY}``,
``<your-key>``, ``changeme``, ``AKIA…EXAMPLE``), references (``os.environ[...]``,
``settings.DB_PASSWORD``), type annotations (``password: str``), and the hashes, ids and base64
that fill logs (git SHAs, lockfile checksums, UUIDs, tape ids): no rule fires on a random-looking
string that has neither a secret's shape nor a secret's name.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import re
import sys
import threading
from urllib.parse import unquote

from engram.digest import text_hash


@dataclasses.dataclass(frozen=True)
class Rule:
    """One kind of secret: ``name`` is what ``[REDACTED:<name>]`` says."""

    name: str
    finds: str    # what it finds, for the docs
    sources: str  # the public scanner rules it stands for (gitleaks, trufflehog, detect-secrets)


RULES: dict[str, Rule] = {}


def _rule(name: str, finds: str, sources: str = "") -> str:
    if name not in RULES:
        RULES[name] = Rule(name, finds, sources)
    return name


# --------------------------------------------------------------------------------------------
# Tokens with a shape of their own

# a run of token characters long enough to hold a token (16): found in a copy of the text, one byte
# a character, in which every token character is ``a`` and every other character a space (non-ASCII
# characters become ``?`` first, which is no token character either), by ``bytes.find``
_TOKEN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-."
_TOKEN_MAP = bytes(0x61 if chr(i) in _TOKEN_CHARS else 0x20 for i in range(256))
_RUN = b"a" * 16


def _run_starts(text: str) -> list[int]:
    """Where every run of at least 16 token characters (``[A-Za-z0-9_\\-.]``) of ``text`` starts,
    in order: what ``[^A-Za-z0-9_\\-.][A-Za-z0-9_\\-.]{16}`` finds (+1), and 0 when the text opens
    with such a run. ``encode("ascii", "replace")`` writes one ``?`` for each other character, so
    positions stay those of the text."""
    marks = text.encode("ascii", "replace").translate(_TOKEN_MAP)
    find = marks.find
    out = []
    p = find(_RUN)
    while p >= 0:
        out.append(p)
        e = find(b" ", p + 16)   # the end of this run; the next run of 16 starts after it
        if e < 0:
            break
        p = find(_RUN, e)
    return out
_END = r"(?![A-Za-z0-9])"
_HEX = "0123456789abcdef"
_DIGITS = "0123456789"

# (rule, what it finds, sources, literal starts, pattern matched where a start is). A start of one
# character picks every run beginning with it. Group "v", when present, is the part replaced.
_TOKEN_TABLE: list[tuple[str, str, str, tuple[str, ...], str]] = [
    ("anthropic-key", "Anthropic API, admin and OAuth keys (`sk-ant-api03-…`)",
     "gitleaks anthropic-api-key, anthropic-admin-api-key",
     ("sk-ant-",), r"sk-ant-(?:api|admin|sid|oat|ort)\d\d-[A-Za-z0-9_\-]{32,}"),
    ("openrouter-key", "OpenRouter keys (`sk-or-v1-…`)", "trufflehog openrouter",
     ("sk-or-",), r"sk-or-v1-[a-f0-9]{64}"),
    ("openai-key", "OpenAI project, service-account, admin and legacy keys; DeepSeek-style `sk-<32+>`",
     "gitleaks openai-api-key, trufflehog openai/deepseek",
     ("sk-",), r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,}|sk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}"
               r"|sk-[A-Za-z0-9]{32,}" + _END),
    ("mapbox-key", "Mapbox secret tokens (`sk.eyJ…`)", "gitleaks mapbox-api-token",
     ("sk.eyJ",), r"sk\.eyJ[A-Za-z0-9_\-]{20,}\.[A-Za-z0-9_\-]{20,}"),
    ("groq-key", "Groq keys (`gsk_…`)", "trufflehog groq", ("gsk_",), r"gsk_[A-Za-z0-9]{48,}"),
    ("xai-key", "xAI keys (`xai-…`)", "trufflehog xai", ("xai-",), r"xai-[A-Za-z0-9]{70,}"),
    ("perplexity-key", "Perplexity keys (`pplx-…`)", "gitleaks perplexity-api-key",
     ("pplx-",), r"pplx-[A-Za-z0-9]{40,}"),
    ("replicate-token", "Replicate tokens (`r8_…`)", "trufflehog replicate", ("r8_",), r"r8_[A-Za-z0-9]{30,}"),
    ("huggingface-token", "Hugging Face user and organisation tokens (`hf_…`, `api_org_…`)",
     "gitleaks huggingface-access-token, huggingface-organization-api-token",
     ("hf_", "api_org_"), r"(?:hf|api_org)_[A-Za-z0-9]{30,}"),
    ("langsmith-key", "LangSmith keys (`lsv2_pt_…`)", "trufflehog langsmith",
     ("lsv2_",), r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}"),
    ("google-api-key", "Google / GCP / Gemini API keys (`AIza…`)", "gitleaks gcp-api-key",
     ("AIza",), r"AIza[0-9A-Za-z_\-]{35}"),
    ("google-oauth", "Google OAuth client secrets (`GOCSPX-…`), access tokens (`ya29.…`), refresh tokens (`1//0…`)",
     "trufflehog googleoauth2, gcp",
     ("GOCSPX-", "ya29.", "0"), r"GOCSPX-[A-Za-z0-9_\-]{24,}|ya29\.[A-Za-z0-9_\-]{30,}|(?<=1//)0[A-Za-z0-9_\-]{40,}"),
    ("aws-access-key", "AWS access key ids (`AKIA…`, `ASIA…`)", "gitleaks aws-access-token",
     ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"), r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[0-9A-Z]{16}" + _END),
    ("aws-session-token", "AWS session tokens (`IQoJb3JpZ2lu…`, `FwoGZXIvYXdz…`)", "trufflehog aws_session_keys",
     ("IQoJb3JpZ2lu", "FwoGZXIvYXdz"), r"(?:IQoJb3JpZ2lu|FwoGZXIvYXdz)[A-Za-z0-9+/=]{100,}"),
    ("aws-bedrock-key", "Amazon Bedrock API keys (`ABSKQmVkcm9jaw…`, `bedrock-api-key-…`)",
     "gitleaks aws-amazon-bedrock-api-key-long-lived, -short-lived",
     ("ABSK", "bedrock-api-key-"), r"ABSK[A-Za-z0-9+/]{100,}={0,2}|bedrock-api-key-[A-Za-z0-9+/=]{40,}"),
    ("alibaba-key", "Alibaba Cloud access key ids (`LTAI…`)", "gitleaks alibaba-access-key-id",
     ("LTAI",), r"LTAI[A-Za-z0-9]{20}" + _END),
    ("digitalocean-token", "DigitalOcean tokens (`dop_v1_…`, `doo_v1_…`, `dor_v1_…`)",
     "gitleaks digitalocean-pat, -access-token, -refresh-token",
     ("dop_v1_", "doo_v1_", "dor_v1_"), r"do[opr]_v1_[a-f0-9]{64}"),
    ("heroku-key", "Heroku API keys (`HRKU-AA…`)", "gitleaks heroku-api-key-v2",
     ("HRKU-",), r"HRKU-AA[0-9A-Za-z_\-]{58}"),
    ("cloudflare-key", "Cloudflare origin CA keys (`v1.0-…`)", "gitleaks cloudflare-origin-ca-key",
     ("v1.0-",), r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}"),
    ("flyio-token", "Fly.io tokens and macaroons (`fo1_…`, `fm2_…`)", "gitleaks flyio-access-token",
     ("fo1_",), r"fo1_[A-Za-z0-9_\-]{43}"),
    ("supabase-token", "Supabase access tokens (`sbp_…`)", "trufflehog supabasetoken",
     ("sbp_",), r"sbp_[a-f0-9]{40}"),
    ("vault-token", "HashiCorp Vault service and batch tokens (`hvs.…`, `hvb.…`)",
     "gitleaks vault-service-token, vault-batch-token",
     ("hvs.", "hvb."), r"hv[sb]\.[A-Za-z0-9_\-]{90,}"),
    ("pulumi-token", "Pulumi access tokens (`pul-…`)", "gitleaks pulumi-api-token", ("pul-",), r"pul-[a-f0-9]{40}"),
    ("doppler-token", "Doppler tokens (`dp.pt.…`)", "gitleaks doppler-api-token",
     ("dp.",), r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}"),
    ("databricks-token", "Databricks tokens (`dapi…`)", "gitleaks databricks-api-token",
     ("dapi",), r"dapi[a-f0-9]{32}(?:-\d)?" + _END),
    ("planetscale-token", "PlanetScale tokens and passwords (`pscale_tkn_…`, `pscale_pw_…`)",
     "gitleaks planetscale-api-token, -password, -oauth-token",
     ("pscale_",), r"pscale_(?:tkn|pw|oauth)_[A-Za-z0-9_=.\-]{32,64}"),
    ("scalingo-token", "Scalingo tokens (`tk-us-…`)", "gitleaks scalingo-api-token",
     ("tk-us-",), r"tk-us-[A-Za-z0-9_\-]{48}"),
    ("tailscale-key", "Tailscale keys (`tskey-auth-…`)", "trufflehog tailscale",
     ("tskey-",), r"tskey-[a-z]+-[A-Za-z0-9]{6,}-[A-Za-z0-9]{16,}"),
    ("age-secret-key", "age secret keys (`AGE-SECRET-KEY-1…`)", "gitleaks age-secret-key",
     ("AGE-SECRET-KEY-",), r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    ("1password-key", "1Password secret keys (`A3-…`) and service-account tokens (`ops_eyJ…`)",
     "gitleaks 1password-secret-key, 1password-service-account-token",
     ("A3-", "ops_eyJ"), r"A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}"
                        r"|ops_eyJ[A-Za-z0-9+/]{100,}={0,3}"),
    ("salesforce-token", "Salesforce access tokens (`00D…!AQ…`)", "trufflehog salesforce",
     ("00D",), r"00D[A-Za-z0-9]{12,15}![A-Za-z0-9._]{80,}"),
    ("django-secret-key", "Django secret keys made by `startproject` (`django-insecure-…`)", "",
     ("django-insecure-",), r"django-insecure-[a-z0-9!@#$%^&*(\-_=+)]{40,}"),
    ("github-token", "GitHub tokens (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`)",
     "gitleaks github-pat, github-oauth, github-app-token, github-refresh-token, github-fine-grained-pat",
     ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
     r"gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,}"),
    ("gitlab-token", "GitLab tokens (`glpat-`, `gldt-`, `glrt-`, `glptt-`, `glcbt-`, `gloas-`, … and `GR1348941…`)",
     "gitleaks gitlab-* (13 rules)",
     ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "glft-", "glimt-", "glsoat-", "glagent-", "gloas-",
      "glffct-", "GR1348941"),
     r"gl(?:pat|dt|rt|ptt|cbt|ft|imt|soat|agent|oas|ffct)-[A-Za-z0-9_\-]{20,}(?:\.[0-9a-z]{2}\.[0-9a-z]{7})?"
     r"|GR1348941[A-Za-z0-9_\-]{20,}"),
    ("atlassian-token", "Atlassian API tokens and Bitbucket app passwords (`ATATT3…`, `ATBB…`)",
     "gitleaks atlassian-api-token, trufflehog bitbucketapppassword",
     ("ATATT3", "ATBB"), r"ATATT3[A-Za-z0-9_\-=]{150,}|ATBB[A-Za-z0-9_=.\-]{32}"),
    ("npm-token", "npm tokens (`npm_…`)", "gitleaks npm-access-token", ("npm_",), r"npm_[A-Za-z0-9]{36}" + _END),
    ("pypi-token", "PyPI and TestPyPI upload tokens (`pypi-AgE…`)",
     "gitleaks pypi-upload-token, detect-secrets PypiToken",
     ("pypi-AgE",), r"pypi-AgE[A-Za-z0-9_\-]{50,}"),
    ("rubygems-key", "RubyGems API keys (`rubygems_…`)", "gitleaks rubygems-api-token",
     ("rubygems_",), r"rubygems_[a-f0-9]{48}"),
    ("clojars-token", "Clojars tokens (`CLOJARS_…`)", "gitleaks clojars-api-token",
     ("CLOJARS_",), r"CLOJARS_[a-z0-9]{60}"),
    ("nuget-key", "NuGet API keys (`oy2…`)", "trufflehog nugetapikey", ("oy2",), r"oy2[a-z0-9]{43}" + _END),
    ("docker-token", "Docker Hub access tokens (`dckr_pat_…`)", "trufflehog dockerhub",
     ("dckr_",), r"dckr_(?:pat|oat)_[A-Za-z0-9_\-]{20,}"),
    ("artifactory-token", "JFrog Artifactory API keys and reference tokens (`AKCp…`, `cmVmdGtu…`)",
     "gitleaks artifactory-api-key, artifactory-reference-token",
     ("AKCp", "cmVmd"), r"AKCp[A-Za-z0-9]{69}|cmVmd[A-Za-z0-9]{59,}"),
    ("sonar-token", "SonarQube tokens (`squ_`, `sqp_`, `sqa_`)", "gitleaks sonar-api-token",
     ("squ_", "sqp_", "sqa_"), r"sq[upa]_[a-f0-9]{40}"),
    ("circleci-token", "CircleCI personal tokens (`CCIPAT_…`)", "trufflehog circleci",
     ("CCIPAT_",), r"CCIPAT_[A-Za-z0-9]{20,}_[a-f0-9]{40}"),
    ("buildkite-token", "Buildkite tokens (`bkua_…`)", "trufflehog buildkite", ("bkua_",), r"bkua_[a-f0-9]{40}"),
    ("sentry-token", "Sentry user and organisation tokens (`sntryu_…`, `sntrys_eyJ…`)",
     "gitleaks sentry-user-token, sentry-org-token",
     ("sntryu_", "sntrys_"), r"sntryu_[a-f0-9]{64}|sntrys_eyJ[A-Za-z0-9+/=_]{50,}"),
    ("linear-key", "Linear API keys (`lin_api_…`)", "gitleaks linear-api-key",
     ("lin_api_",), r"lin_api_[A-Za-z0-9]{40}"),
    ("notion-token", "Notion tokens (`ntn_…`, `secret_…`)", "gitleaks notion-api-token",
     ("ntn_", "secret_"), r"ntn_[0-9]{11}[A-Za-z0-9]{35}|secret_[A-Za-z0-9]{43}" + _END),
    ("postman-key", "Postman API keys (`PMAK-…`)", "gitleaks postman-api-token",
     ("PMAK-",), r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}"),
    ("readme-key", "ReadMe API keys (`rdme_…`)", "gitleaks readme-api-token", ("rdme_",), r"rdme_[a-z0-9]{70}"),
    ("prefect-key", "Prefect API keys (`pnu_…`)", "gitleaks prefect-api-token", ("pnu_",), r"pnu_[A-Za-z0-9]{36}"),
    ("infracost-key", "Infracost API keys (`ico-…`)", "gitleaks infracost-api-token",
     ("ico-",), r"ico-[A-Za-z0-9]{32}"),
    ("grafana-token", "Grafana cloud, service-account and API tokens (`glc_eyJ…`, `glsa_…`, `eyJrIjoi…`)",
     "gitleaks grafana-cloud-api-token, grafana-service-account-token, grafana-api-key",
     ("glc_", "glsa_", "eyJrIjoi"),
     r"glc_[A-Za-z0-9+/]{32,}={0,3}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|eyJrIjoi[A-Za-z0-9]{60,}={0,3}"),
    ("newrelic-key", "New Relic keys (`NRAK-`, `NRII-`, `NRJS-`)", "gitleaks new-relic-*",
     ("NRAK-", "NRII-", "NRJS-", "NRRA-"), r"NR(?:AK|II|JS|RA)-[A-Za-z0-9_\-]{19,}"),
    ("dynatrace-token", "Dynatrace tokens (`dt0c01.…`)", "gitleaks dynatrace-api-token",
     ("dt0c01.",), r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}"),
    ("saas-token", "Contentful, Figma, Airtable, Typeform, Frame.io, Shippo, EasyPost, Duffel, Flutterwave, "
                   "Brevo, Sourcegraph and Harness tokens by their prefixes",
     "gitleaks contentful/typeform/frameio/airtable/shippo/easypost/duffel/flutterwave/sendinblue/"
     "sourcegraph/harness rules, trufflehog figma",
     ("CFPAT-", "figd_", "pat", "tfp_", "fio-u-", "shippo_", "EZAK", "EZTK", "duffel_", "FLWSECK", "FLWPUBK",
      "xkeysib-", "sgp_"),
     r"CFPAT-[A-Za-z0-9_\-]{43}|figd_[A-Za-z0-9_\-]{40,}|pat[A-Za-z0-9]{14}\.[a-f0-9]{64}"
     r"|pat\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}"
     r"|tfp_[A-Za-z0-9_\-.=]{59}|fio-u-[A-Za-z0-9_\-=]{64}|shippo_(?:live|test)_[a-fA-F0-9]{40}"
     r"|EZ[AT]K[A-Za-z0-9]{54}|duffel_(?:test|live)_[A-Za-z0-9_\-=]{43}"
     r"|FLW(?:SECK|PUBK)_TEST-[a-hA-H0-9]{12,32}(?:-X)?|xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}"
     r"|sgp_(?:[a-fA-F0-9]{16}_)?[a-fA-F0-9]{40}"),
    ("asana-token", "Asana personal access tokens (`1/…:…`, `2/…:…`)", "trufflehog asanapersonalaccesstoken",
     tuple(_DIGITS), r"(?<=[0-9]/)[0-9]{13,20}(?:/[0-9]{13,20})?:[a-f0-9]{32}"),
    ("shopify-token", "Shopify tokens and shared secrets (`shpat_`, `shpss_`, `shpca_`, `shppa_`)",
     "gitleaks shopify-*", ("shp",), r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"),
    ("square-token", "Square access tokens and OAuth secrets (`EAAA…`, `sq0atp-…`, `sq0csp-…`)",
     "gitleaks square-access-token, detect-secrets SquareOAuth",
     ("EAAA", "sq0"), r"EAAA[A-Za-z0-9_\-]{60}|sq0(?:atp|csp)-[A-Za-z0-9_\-]{22,43}"),
    ("facebook-token", "Facebook page/user access tokens (`EAAG…`, `EAAC…`)", "gitleaks facebook-page-access-token",
     ("EAA",), r"EAA[BCDGIMU][A-Za-z0-9]{100,}"),
    ("stripe-key", "Stripe secret, restricted and webhook-signing keys (`sk_live_`, `rk_live_`, `sk_test_`, `whsec_`)",
     "gitleaks stripe-access-token", ("sk_", "rk_", "whsec_"),
     r"[sr]k_(?:live|test|prod)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{32,}"),
    ("plaid-token", "Plaid access tokens (`access-production-…`)", "gitleaks plaid-api-token",
     ("access-",), r"access-(?:sandbox|development|production)-"
                   r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
    ("slack-token", "Slack bot, user, app, config and legacy tokens (`xoxb-`, `xoxp-`, `xapp-`, `xoxe-`, …)",
     "gitleaks slack-bot-token, slack-user-token, slack-app-token, slack-config-*, slack-legacy-*",
     ("xox", "xapp-"), r"xox[abposre](?:\.xox[bp])?-[0-9A-Za-z\-]{10,}|xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+"),
    ("discord-token", "Discord bot tokens", "detect-secrets DiscordBotToken",
     ("M", "N", "O"), r"[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,}"),
    ("telegram-token", "Telegram bot tokens (`<bot id>:AA…`)",
     "detect-secrets TelegramBotToken, gitleaks telegram-bot-api-token",
     ("AA",), r"(?<=[0-9]:)AA[A-Za-z0-9_\-]{33}" + r"(?![A-Za-z0-9_\-])"),
    ("twitter-token", "Twitter/X app bearer tokens (`AAAAAAAAAAAAAAAAAAAAA…`)", "gitleaks twitter-bearer-token",
     ("AA",), r"A{22}[A-Za-z0-9%]{60,}"),
    ("twilio-key", "Twilio API keys (`SK` + 32 hex)", "gitleaks twilio-api-key, detect-secrets Twilio",
     ("SK",), r"SK[0-9a-f]{32}" + _END),
    ("sendgrid-key", "SendGrid API keys (`SG.…`)", "gitleaks sendgrid-api-token, detect-secrets SendGrid",
     ("SG.",), r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{30,50}"),
    ("mailgun-key", "Mailgun API keys and webhook signing keys (`key-…`, `<32 hex>-<8>-<8>`)",
     "trufflehog mailgun, gitleaks mailgun-*", ("key-",) + tuple(_HEX),
     r"key-[a-f0-9]{32}" + _END + r"|[a-f0-9]{32}-[a-f0-9]{8}-[a-f0-9]{8}" + _END),
    ("mailchimp-key", "Mailchimp API keys (`<32 hex>-us<N>`)", "detect-secrets Mailchimp, gitleaks mailchimp-api-key",
     tuple(_HEX), r"[a-f0-9]{32}-us[0-9]{1,2}" + _END),
    ("bundler-credentials", "Bundler host credentials (`BUNDLE_<HOST>=user:pass`)", "gitleaks sidekiq-secret",
     ("BU", "bu"), r"(?i:bundle_(?:[a-z0-9-]+__)+[a-z0-9]+)[\\\"'\]]{0,6}[ \t]*[=:][ \t]*\\*[\"']?"
                   r"(?P<v>[^\s\"'\\:]+:[^\s\"'\\]+)"),
    ("jwt", "JSON Web Tokens (`eyJ….eyJ….…`), e.g. Supabase service keys", "gitleaks jwt, detect-secrets JwtToken",
     ("eyJ",), r"eyJ[A-Za-z0-9_\-]{8,}\.ey[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*={0,2}"),
]

# Formats whose distinctive part is in the middle: (literal, rule, what, sources, pattern searched
# from up to ``back`` characters before the literal)
_PIVOT_TABLE: list[tuple[str, str, str, str, int, str]] = [
    ("Q~", "azure-client-secret", "Azure AD / Entra client secrets (`…8Q~…`)", "gitleaks azure-ad-client-secret",
     4, r"(?<![A-Za-z0-9_~.])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}"),
    ("+ACR", "azure-registry-password", "Azure Container Registry passwords (`…+ACR…`)",
     "trufflehog azurecontainerregistry", 42, r"(?<![A-Za-z0-9+])[A-Za-z0-9+/]{42}\+ACR[A-Za-z0-9]{6}"),
    (".atlasv1.", "terraform-token", "Terraform Cloud / Enterprise tokens (`….atlasv1.…`)",
     "gitleaks hashicorp-tf-api-token", 14, r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70}"),
    (":APA91b", "firebase-key", "Firebase Cloud Messaging server keys (`AAAA…:APA91b…`)",
     "trufflehog firebasecloudmessaging", 11, r"AAAA[A-Za-z0-9_\-]{7}:APA91b[A-Za-z0-9_\-]{100,}"),
    ("access_token$", "braintree-token", "Braintree / PayPal access tokens (`access_token$production$…`)",
     "trufflehog paypaloauth", 0, r"access_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}"),
    # a body in base64 (``/``, ``+``) right after a short prefix: the runs of token characters cut it
    ("fm2_", "flyio-token", "", "", 0, r"(?<![A-Za-z0-9])fm2_[A-Za-z0-9+/]{100,}={0,3}"),
]


def _build_tokens():
    by2: dict[str, list] = {}
    by1: dict[str, list] = {}
    for name, finds, sources, starts, pattern in _TOKEN_TABLE:
        _rule(name, finds, sources)
        rx = re.compile(pattern)
        for s in starts:
            lst = (by1 if len(s) == 1 else by2).setdefault(s[:2], [])
            if (rx, name) not in lst:
                lst.append((rx, name))
    for k2, lst in by2.items():  # a run is tried against the rules of its first two characters and of its first
        for item in by1.get(k2[0], ()):
            if item not in lst:
                lst.append(item)
    pivots = {}
    for lit, name, finds, sources, back, pattern in _PIVOT_TABLE:
        _rule(name, finds, sources)
        pivots[lit.lower()] = (lit, back, re.compile(pattern), name)
    return by2, by1, pivots


_BY2, _BY1, _PIVOTS = _build_tokens()

# "EXAMPLE" keys from vendor docs, runs of one character, ascending runs: placeholders, not secrets
_FAKE = re.compile(r"(?i)example|x{8}|(?:abcdefgh|bcdefghi|12345678|23456789|01234567)")


def _fake(token: str) -> bool:
    return len(set(token)) <= 6 or bool(_FAKE.search(token))


# --------------------------------------------------------------------------------------------
# Values named as secrets

_PASSWORD_WORDS = {"password", "passwd", "pwd", "pass", "passphrase", "passcode", "pw", "contrasena"}
_SECRET_WORDS = {"secret", "token", "apikey", "credential", "credentials", "creds", "cred", "auth",
                 "secretkey", "accesskey", "privatekey", "authtoken", "accesstoken", "apitoken",
                 "clientsecret", "authkey", "masterkey", "signingkey", "encryptionkey", "licensekey",
                 "sharedkey", "accountkey", "storagekey", "apisecret"}
_SIG_WORDS = {"sig", "signature"}
# words a name can end with after its secret word: ``SECRET_KEY_BASE``, ``API_KEY_PROD``
_TRAILING = {"value", "val", "b64", "base64", "hex", "raw", "enc", "encoded", "base", "prod", "production",
             "dev", "development", "staging", "stage", "live", "local", "primary", "secondary", "old", "new",
             "current", "v1", "v2", "v3", "1", "2", "3"}
# ``<word>_key`` names that hold a secret (other ``<word>_key`` need a random-looking value)...
_SECRET_KEY_QUALIFIERS = {"api", "secret", "access", "private", "priv", "account", "signing", "sign",
                          "encryption", "encrypt", "crypt", "crypto", "master", "auth", "client", "service",
                          "app", "application", "license", "licence", "shared", "storage", "webhook",
                          "session", "cookie", "hmac", "jwt", "sas", "subscription", "admin", "write",
                          "read", "ingest", "deploy", "consumer", "bot", "user", "server", "root", "db",
                          "database", "restricted", "sdk", "management", "integration", "personal",
                          "rest", "secure", "aes", "fernet", "cipher", "decryption", "symmetric"}
# ...and names whose secret word means something else: ``public_key``, ``sort_key``, ``max_tokens``,
# ``page_token``, ``eos_token``
_NOT_SECRET_KEY = {"public", "pub", "publishable", "sort", "partition", "primary", "foreign", "cache", "hot",
                   "shortcut", "idempotency", "dict", "object", "s3", "lookup", "map", "hash", "row", "index",
                   "unique", "composite", "routing", "group", "message", "dedup", "dedupe", "i18n",
                   "translation", "ssh", "gpg", "pgp", "kms", "cmk", "host", "state", "tag", "label", "column",
                   "field", "attr", "property", "config", "setting", "env", "item", "entry", "node", "table",
                   "record", "metric", "event", "trace", "span", "cursor", "order", "merge", "join", "match",
                   "select", "site", "natural", "surrogate", "candidate", "compound", "fingerprint", "type",
                   "kind", "registry", "redis", "query", "search", "verify", "verification", "sign_in"}
_NOT_SECRET_TOKEN = {"page", "next", "continuation", "pagination", "sync", "resume", "cancel", "cancellation",
                     "csrf", "xsrf", "eos", "bos", "pad", "unk", "sep", "cls", "mask", "max", "min", "num",
                     "total", "input", "output", "prompt", "completion", "cached", "reasoning", "context",
                     "special", "end", "start", "stop", "first", "last", "lexer", "parser", "type", "kind",
                     "count", "decoder", "encoder", "per", "image", "video", "audio", "vision", "break",
                     "media", "placeholder", "boi", "eoi", "think", "tool", "system", "pause", "unused"}
_NOT_SECRET_COMPOUND = ("csrf", "xsrf", "next", "page", "continuation", "sync", "max", "num", "total")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


@functools.lru_cache(maxsize=8192)
def _name_kind(name: str) -> str | None:
    """What a name says its value is: ``password``, ``secret`` (random-looking, a strong name),
    ``key`` (random-looking, a weak name: ``key``, ``STRIPE_KEY``), ``sig`` (a signature: only in
    URL queries and connection strings), or None (not a secret's name)."""
    words = [w.lower() for w in _WORD.findall(name)]
    while len(words) > 1 and words[-1] in _TRAILING:
        words.pop()
    if not words:
        return None
    last = words[-1]
    prev = words[-2] if len(words) > 1 else ""
    if "public" in words or "pub" in words:
        return None  # ``publicKeyToken``, ``public_key``: published on purpose
    if last in _PASSWORD_WORDS or last.endswith(("password", "passwd", "passphrase")):
        return "password"
    if last in ("token", "tokens") or (last.endswith("token") and len(last) > 5):
        if prev in _NOT_SECRET_TOKEN or last == "tokens" or last.startswith(_NOT_SECRET_COMPOUND):
            return None
        return "secret"
    if last == "pat":  # a personal access token, or a pattern (``_HEX_PAT``): the value decides
        return "key"
    if last in _SECRET_WORDS or (last.endswith("secret") and len(last) > 6):
        return None if last.startswith(_NOT_SECRET_COMPOUND) else "secret"
    if last == "key":
        if prev in _SECRET_KEY_QUALIFIERS:
            return "secret"
        return None if prev in _NOT_SECRET_KEY else "key"
    if last in _SIG_WORDS:
        return "sig"
    return None


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_NAME_REST = re.compile(r"[A-Za-z0-9_.\-]{0,64}")
# after a name: closing quotes/brackets, a separator, an opening quote (maybe JSON-escaped)
_AFTER_NAME = re.compile(r"""([\\"'\]`]{0,6})[ \t]*(:=|=>|=|:)[ \t]*(\\*["'`])?""")
# a value after a space: ``--password x``, ``… set NAME x``, SQL ``PASSWORD 'x'``, .netrc ``password x``
_AFTER_FLAG = re.compile(r"""(["']?)[ \t]+(\\?["'`])?""")
_MAX_VALUE = 2048  # a value this long is not one secret: it is rejected (and what it holds skipped)
_VALUE = {
    '"': re.compile(r'(?:[^"\\\n]|\\.){0,2048}+'),
    "'": re.compile(r"[^'\n]{0,2048}+"),
    "`": re.compile(r"[^`\n]{0,2048}+"),
    '\\"': re.compile(r'(?:[^"\\\n]|\\[^"\n]){0,2048}+'),
    "\\'": re.compile(r"(?:[^'\\\n]|\\[^'\n]){0,2048}+"),
    "": re.compile(r"[^\s\"'`<>,;|\\]{0,2048}+"),
    "?": re.compile(r"[^\s\"'`<>,;&|\\]{0,2048}+"),  # a URL query's value ends at the next parameter
    "<": re.compile(r"[^<\n]{0,2048}+"),
}
_NETRC = re.compile(r"(?:^|\s)login\s+\S+\s+$")
# ``aws configure set NAME VALUE``, ``npm config set //host/:NAME VALUE``, ``git config --global NAME VALUE``
_SET_CMD = re.compile(r"(?:\bset|config:set|\bconfig(?:\s+--(?:global|local|system))?)\s+\S*$")
_CONFIG_KEY = re.compile(r"[_.\-]|[a-z][A-Z]")  # ``aws_secret_access_key``, ``_authToken``, not prose's "pass"

_PLACEHOLDER = re.compile(
    r"^(?:x+|\*+|\.+|-+|_+|#+|<[^>]*>?|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\(.*|%[A-Za-z_]+%|%\(.*|%s|\{.*\}?|"
    r"!\w+|&\w+|\*\w+|"
    r"\[[^\]]*\]|(?:your|my|the|some)[-_.]?(?:password|passwd|pass|pwd|secret|token|key|api[-_]?key)|"
    r"(?:password|passwd|pass|pwd|pw|secret|token)\d*|"
    r"(?:your|my|fake|dummy|example|sample|placeholder|changeme|change[-_]me|replace|replace[-_]me|redacted|"
    r"xxx|todo|tbd|secret|password|passwd|pass|token|none|null|nil|undefined|true|false|required|optional|"
    r"default|string|str|bytes|int|env|test|demo|hidden|masked)(?:[-_.][A-Za-z0-9_.-]*)?)$",
    re.I,
)
_REFERENCE = re.compile(r"\$\{|\$\(|\{\{|%\(|process\.env|os\.environ|getenv|environ\[|ENV\[|secrets\.|vault:|"
                        r"REDACTED|(?i:example)|\.\.\.|…")
# a regex describing a secret is not one: ``token=([a-z0-9]+)``
_REGEXISH = re.compile(r"\[[^\]]*\][+*?{]|\\[dwsSDWbB]|\(\?[:=!<P]|\.[*+]|\{\d+(?:,\d*)?\}")
# ``metric.attrs.total_tokens``, ``win32api.RegEnumKey``: a dotted path of identifiers (words, at most
# one group of digits each, unlike random strings) is code
_CODE_REF = re.compile(r"^[A-Za-z_$@][A-Za-z_$]*\d*[A-Za-z_$]*(?:(?:\.|->|::)[A-Za-z_$][A-Za-z_$]*\d*[A-Za-z_$]*)+$")
_CALL = re.compile(r"^[A-Za-z_$@][\w$.]*(?:\(|\[)")
_URLISH = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://|^(?:~|\.{1,2})?/[\w.@~-]+(?:/[\w.@~-]*)*$")
_WORDISH = re.compile(r"^(?:[A-Za-z]+[.:!?…]*|[a-z]+[0-9]*(?:[./_\-](?:[a-z]+[0-9]*|[0-9]+))+)$")
_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z_$-]*$")
# a namespaced id: ``agent:coder:subagent:<uuid>`` (an OpenClaw child session key), ``run:<uuid>``.
# A bare UUID may be a key (Heroku's API keys are UUIDs); one under a name space is an identifier.
_NAMESPACED_ID = re.compile(r"(?:[A-Za-z][\w.-]*:)+[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                            r"[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]+")
_SPACE = re.compile(r"\s")
_TOKENISH = re.compile(r"^[A-Za-z0-9+/=_\-.~:]+$")
_OPENING = {")": "(", "]": "[", "}": "{"}
_BRACKET = re.compile(r"[()\[\]{}]")


def _entropy(s: str) -> float:
    counts: dict[str, int] = {}
    for ch in s:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _classes(v: str) -> int:
    return (any(c.islower() for c in v) + any(c.isupper() for c in v) + any(c.isdigit() for c in v)
            + any(not c.isalnum() for c in v))


def _stand_in(v: str) -> bool:
    """A placeholder or a reference in place of a secret: ``$TOKEN``, ``<pw>``, ``{token}``, ``xxx``."""
    return bool(v.startswith(("[REDACTED", "$", "<", "{", "%")) or _PLACEHOLDER.match(v) or _REFERENCE.search(v))


def _code(v: str) -> bool:
    """``self.password``, ``get_token()``, ``(constants.SECRET or "")``, a regex: code, not a value."""
    core = v.lstrip("([{!*&-")
    return bool(_CODE_REF.match(core) or _CALL.match(core) or _REGEXISH.search(v)
                or "==" in v.rstrip("=") or "!=" in v or "&&" in v or "||" in v)  # base64 ends in "=="


def _plausible(v: str) -> bool:
    """Not a placeholder, a reference, code, a URL or a path: what any named secret must pass."""
    if (len(v) < 6 or _SPACE.search(v) or len(set(v)) <= 3 or _PLACEHOLDER.match(v) or _REFERENCE.search(v)
            or _code(v)):
        return False
    # a URL, or a path (a base64 secret may start with '/', but is a third upper-case)
    return not (_URLISH.match(v) and ("://" in v or sum(c.isupper() for c in v) <= 0.15 * len(v)))


@functools.lru_cache(maxsize=8192)
def _value_ok(kind: str, v: str) -> bool:
    if not _plausible(v):
        return False
    if kind == "password":
        # a human password: anything but a plain word, an identifier or a short number
        if _WORDISH.match(v) or (v.isdigit() and len(v) < 6):
            return False
        if _IDENTIFIER.match(v) and ("_" in v or re.search(r"[a-z][A-Z]", v)):
            return False  # ``hashed_password``, ``newPassword``: a variable
        return True
    if kind == "sig":
        return len(v) >= 16
    # a key or token: random-looking
    if len(v) < 8 or _WORDISH.match(v) or (v.isdigit() and len(v) < 16) or _NAMESPACED_ID.fullmatch(v):
        return False
    if _WORDISH.match(_NOT_ALNUM.sub("", v)):
        return False  # a word in punctuation: ``*(optional)*``, ``]<]image[>[``
    if _IDENTIFIER.match(v):  # letters, '_' and '-' only: an identifier unless long and random
        return (len(v) >= 24 and _entropy(v) >= 4.0
                and not re.search(r"[a-z][A-Z][a-z]|_[A-Za-z]{3}", v))
    if _entropy(v) < 3.0:
        return False
    if kind == "key":  # a bare ``key``, a ``_PAT``: must look random without the help of the name
        return (len(v) >= 16 and _entropy(v) >= 3.5 and _classes(v) >= 2 and any(c.isdigit() for c in v)
                and _TOKENISH.match(v) is not None)
    return True


PASSWORD = _rule("password", "a value assigned to a name that says password (`DB_PASSWORD=`, `\"password\": `, "
                             "`['PASSWORD'] = `, `<password>`, `Password=` in connection strings, `--password`, "
                             "`.netrc`), unless it is a placeholder, a reference, a plain word or code",
                 "detect-secrets KeywordDetector, gitleaks generic-api-key")
SECRET = _rule("secret", "a random-looking value assigned to a name that says secret, token, API key, "
                         "access/private/… key, credential or auth (`SecretAccessKey`, `X-API-Key`, "
                         "`AccountKey=`, `SharedAccessKey=`, `?api_key=`, `_authToken=`); not `token_endpoint`, "
                         "`secret_name`, `max_tokens`, `public_key`, `sort_key`",
                "gitleaks generic-api-key and its provider-keyword rules (~90), detect-secrets KeywordDetector")
SIGNATURE = _rule("signature", "request signatures in URLs and connection strings (`sig=`, `X-Amz-Signature=`, "
                               "`X-Goog-Signature=`): Azure SAS, S3 and GCS pre-signed URLs, Teams workflow URLs",
                  "trufflehog azuresastoken, microsoftteamswebhook")


def _trim(v: str) -> str:
    """An unquoted value without the brackets and punctuation of the code around it: ``None):``."""
    while v:
        c = v[-1]
        if c in _OPENING and v.count(c) > v.count(_OPENING[c]):
            v = v[:-1]
        elif c in ":;,." and len(v) > 1 and v[-2] in _OPENING and v.count(v[-2]) > v.count(_OPENING[v[-2]]):
            v = v[:-1]
        else:
            return v
    return v


def _assignment(text: str, i: int, kw_len: int, out: list, done: list) -> None:
    """A keyword at ``i``: read the name around it, and the value after it when the name is a secret's."""
    ns = i
    lo = max(0, i - 64)
    while ns > lo and text[ns - 1] in _NAME_CHARS:
        ns -= 1
    if ns < done[0]:
        return  # this name was read already (``secret_key`` holds two keywords)
    ne = _NAME_REST.match(text, i + kw_len).end()
    done[0] = ne
    name = text[ns:ne].strip(".-")
    if not name or text.startswith("REDACTED:", ns - 9):
        return
    kind = _name_kind(name)
    if kind is None:
        if name.lower() == "sshpass":
            _dash_p(text, ne, out, spaced=True)
        elif name.startswith("PuTTY-User-Key-File-"):
            _putty(text, ns, out)
        return
    before = text[ns - 1] if ns else " "
    query = before in "?&;"
    if kind == "sig" and not query:
        return
    m = _AFTER_NAME.match(text, ne)
    if m is not None:
        sep = m.group(2)
        vs = m.end()
        if (sep == "=" and text.startswith(("=", "~"), vs)) or (sep == ":" and text.startswith(":", vs)):
            return  # ``==``, ``=~``, ``::``: a comparison or a scope, not an assignment
        if sep == ":" and vs - ne == 1 and before != "<":
            return  # ``secret:prod/db``, ``token:x``: a path or an ARN, not ``name: value``
        opener = m.group(3) or ""
        if len(opener) > 2:
            opener = opener[-2:]  # ``\\\"``: escaped more than once
    elif before == "<" and text.startswith(">", ne):  # <password>value</password>
        vs, opener = ne + 1, "<"
        if not text.startswith("</", _VALUE["<"].match(text, vs).end()):
            return
    else:  # ``--password x``, ``aws configure set aws_secret_access_key x``, ``PASSWORD 'x'`` (SQL), .netrc
        m = _AFTER_FLAG.match(text, ne)
        if m is None:
            return
        vs, opener = m.end(), m.group(2) or ""
        if not (text[ns:ns + 2] == "--"
                or (_CONFIG_KEY.search(name) and opener != "`" and _SET_CMD.search(text, max(0, ns - 40), ns))
                or (kind == "password" and (opener in ("'", '"') and name.lower() in ("password", "passwd")
                                            or _NETRC.search(text, max(0, ns - 200), ns)))):
            return
    ve = _VALUE["?" if not opener and before in "?&" else opener].match(text, vs).end()
    if ve - vs >= _MAX_VALUE:
        done[0] = ve  # the keywords inside are part of it: not read again (``key=key=key=…``)
        return
    v = text[vs:ve]
    if opener.startswith("\\"):
        v = v.rstrip("\\")  # the escaped backslashes of an escaped closing quote
        ve = vs + len(v)
    if not opener:
        v = _trim(v)
        if _BRACKET.search(v) and any(v.count(c) != v.count(o) for c, o in _OPENING.items()):
            return  # ``token=token).sha``, ``(near_contact``: cut out of code
        ve = vs + len(v)
    if v.startswith("[REDACTED") or not _value_ok(kind, v):
        return
    out.append((vs, ve, PASSWORD if kind == "password" else SIGNATURE if kind == "sig" else SECRET))


# --------------------------------------------------------------------------------------------
# Structures: headers, URLs, command lines, private keys

BEARER = _rule("bearer-token", "`Authorization: Bearer …` and other `Bearer <token>`",
               "gitleaks curl-auth-header")
BASIC = _rule("basic-auth", "`Authorization: Basic <base64 user:password>`", "gitleaks curl-auth-header")
AUTH_HEADER = _rule("authorization-header", "the credential of any other `Authorization:` / `Proxy-Authorization:` "
                                            "header (`token …`, `Bot …`, `AWS4-HMAC-SHA256 …`, a bare key)",
                    "gitleaks curl-auth-header")
COOKIE = _rule("cookie", "random-looking values in `Cookie:` / `Set-Cookie:` headers", "")
URL_CREDENTIALS = _rule("url-credentials", "the password in `scheme://user:password@host` "
                                           "(databases, Redis `redis://:pw@`, git remotes, JDBC, AMQP, FTP)",
                        "trufflehog uri, redis, mongodb, postgres, jdbc; detect-secrets BasicAuth")
WEBHOOK = _rule("webhook-url", "the secret path of Slack, Discord, Microsoft Teams and Zapier webhook URLs",
                "gitleaks slack-webhook-url, microsoft-teams-webhook; trufflehog discordwebhook, zapierwebhook")
CURL_USER = _rule("curl-user", "the password of `curl -u user:password` / `--user`", "gitleaks curl-auth-user")
CLI_PASSWORD = _rule("cli-password", "`mysql -p<password>`, `sshpass -p <password>`", "")
PRIVATE_KEY = _rule("private-key", "private-key blocks: PEM (RSA, EC, DSA, OpenSSH, PKCS#8, encrypted), PGP "
                                   "private key blocks, PuTTY keys; also cut short (no END line), JSON-escaped or "
                                   "under line-number gutters",
                    "gitleaks private-key, detect-secrets PrivateKeyDetector")

_AUTH_HEADER = re.compile(
    r"""(?i:authorization)\\?["']?[ \t]*[:=][ \t]*\\?["']?(?:(?P<scheme>(?i:bearer|basic|token|bot|key|digest|"""
    r"""negotiate|apikey|api-key|sso-key|sharedaccesssignature|aws4-hmac-sha256|hmac|jwt|otp))[ \t]+)?"""
    r"""(?P<v>[^"'`\\\r\n<>]{6,2048})""")
_BEARER = re.compile(r"(?i:bearer)[ \t]+(?P<v>[A-Za-z0-9._~+/\-]{20,}=*)")
_COOKIE = re.compile(r"""(?i:cookie)\\?["']?[ \t]*:[ \t]*\\?["']?(?P<v>[^"'`\r\n\\]+)""")
_COOKIE_PAIR = re.compile(r"([^=;\s]+)=([^;\s]+)")
_URL_USERINFO = re.compile(r"://(?P<user>[^\s/?#@:\"'<>\\]*):(?P<v>[^\s/\"'<>\\]+)@(?=[A-Za-z0-9\[])")
_URL_HOST = re.compile(r"://(?P<host>[A-Za-z0-9.\-]+)(?::\d+)?(?P<path>/[^\s\"'<>\\`)]*)?")
_WEBHOOKS = (("hooks.slack.com", "/"), ("discord.com", "/api/webhooks/"), ("discordapp.com", "/api/webhooks/"),
             ("webhook.office.com", "/"), ("hooks.zapier.com", "/hooks/catch/"))
_CURL_USER = re.compile(r"""[ \t](?:-u|--user)(?:=|[ \t]+)(?P<q>["']?)[^\s:"']*:(?P<v>[^\s"']+)(?P=q)""")
_DASH_P = re.compile(r"""[ \t]-p(?P<sp>[ \t]+)?(?P<q>["']?)(?P<v>[^\s"']+)(?P=q)""")
_PEM_BEGIN = re.compile(r"-----BEGIN ([A-Z0-9 ]{0,40}?)PRIVATE KEY( BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}?PRIVATE KEY(?: BLOCK)?-----")
# what follows a BEGIN line when the END line is missing (a cut-short block): lines of base64 or
# of headers, separated by real or JSON-escaped line breaks (or spaces, once a label joined them),
# each maybe behind a line-number gutter or an indent
_PEM_TAIL = re.compile(
    r"(?:(?:\r?\n|\\r?\\n|[ \t])(?:[ \t]*+\d++(?:→|\t))?+[ \t\"']*+"
    r"(?:[A-Za-z0-9+/=]++|[A-Za-z-]++: [^\n\\]*+)?+)*+")
_B64CHARS = re.compile(r"[A-Za-z0-9+/]{16,}")


def _line_end(text: str, i: int, limit: int = 4000) -> int:
    """End of the (shell) line at ``i``: a newline not escaped by a backslash."""
    j = i
    end = min(len(text), i + limit)
    while True:
        k = text.find("\n", j, end)
        if k < 0:
            return end
        if k > 0 and text[k - 1] == "\\":
            j = k + 1
            continue
        return k


def _auth_header(text: str, i: int, out: list, done: list) -> None:
    if i < done[2]:
        return  # inside a header value read already
    m = _AUTH_HEADER.match(text, i)
    if m is None:
        return
    done[2] = m.end()
    v = m.group("v").rstrip(" \t,;")
    scheme = (m.group("scheme") or "").lower()
    if not scheme and text[m.start("v") - 1] not in "\"'" and "=" in text[i:m.start("v")]:
        return  # ``authorization = self.headers.get(...)``: code
    if scheme not in ("aws4-hmac-sha256", "digest", "sharedaccesssignature", "hmac"):
        if not scheme and " " in v:
            return  # prose: "Authorization: the header must ..."
        v = v.split(" ", 1)[0]
    if len(v) < 8 or v.startswith("+") or _stand_in(v) or _WORDISH.match(v) or _code(v):
        return
    rule = BEARER if scheme == "bearer" else BASIC if scheme == "basic" else AUTH_HEADER
    s = m.start("v")
    out.append((s, s + len(v), rule))


def _bearer(text: str, i: int, out: list) -> None:
    m = _BEARER.match(text, i)
    if m is None:
        return
    v = m.group("v")
    if _plausible(v) and not _fake(v) and _entropy(v) >= 3.0:
        out.append((m.start("v"), m.end("v"), BEARER))


def _cookie(text: str, i: int, out: list) -> None:
    m = _COOKIE.match(text, i)
    if m is None:
        return
    for p in _COOKIE_PAIR.finditer(m.group("v")):
        v = p.group(2)
        if len(v) >= 16 and _plausible(v) and _entropy(v) >= 3.5:
            s = m.start("v") + p.start(2)
            out.append((s, s + len(v), COOKIE))


def _url(text: str, i: int, out: list) -> None:
    m = _URL_USERINFO.match(text, i)
    if m is not None:
        v = m.group("v")
        plain = unquote(v)
        if not (len(v) < 3 or _stand_in(v) or _PLACEHOLDER.match(plain) or plain.isalpha() and plain.islower()
                or _SPACE.search(plain) or ("." in m.group("user") and v[:1].isdigit())):  # ``host:port,h2``
            out.append((m.start("v"), m.end("v"), URL_CREDENTIALS))
        return
    m = _URL_HOST.match(text, i)
    if m is None or not m.group("path") or "[REDACTED:" in m.group("path"):
        return
    host = m.group("host").lower()
    for h, path in _WEBHOOKS:
        if (host == h or host.endswith("." + h)) and m.group("path").startswith(path):
            s = m.start("path") + len(path)
            e = m.end("path")
            if e - s >= 8:
                out.append((s, e, WEBHOOK))
            return


def _curl(text: str, i: int, out: list, done: list) -> None:
    if i < done[1]:
        return  # on a command line read already
    end = _line_end(text, i)
    done[1] = end
    for m in _CURL_USER.finditer(text, i, end):
        if not _stand_in(m.group("v")):
            out.append((m.start("v"), m.end("v"), CURL_USER))


def _dash_p(text: str, i: int, out: list, spaced: bool = False) -> None:
    """``mysql … -pSECRET`` (no space: a space means "ask me"), ``sshpass -p SECRET``."""
    end = _line_end(text, i, 1000)
    for m in _DASH_P.finditer(text, i, end):
        if bool(m.group("sp")) != spaced:
            continue
        if len(m.group("v")) >= 4 and not _stand_in(m.group("v")):
            out.append((m.start("v"), m.end("v"), CLI_PASSWORD))
        return


def _pem(text: str, i: int, out: list, end: list) -> None:
    """``end``: [the END line found by the last search (or None), where that search started]; a
    BEGIN before it needs no search of its own (many BEGIN lines, one END: no quadratic search)."""
    m = _PEM_BEGIN.match(text, i)
    if m is None:
        return
    body_start = m.end()
    if end[1] < 0 or body_start < end[1] or (end[0] is not None and body_start > end[0].start()):
        end[0], end[1] = _PEM_END.search(text, body_start), body_start
    e = end[0]
    if e is not None and e.start() - body_start <= 65536:
        body = text[body_start:e.start()]
        if sum(len(b) for b in _B64CHARS.findall(body)) >= 0.5 * len(body.strip()) and _B64CHARS.search(body):
            out.append((i, e.end(), PRIVATE_KEY))
            return
    tail = _PEM_TAIL.match(text, body_start).end()
    if _B64CHARS.search(text, body_start, tail):
        out.append((i, tail, PRIVATE_KEY))


def _putty(text: str, i: int, out: list) -> None:
    j = text.find("Private-MAC:", i, i + 20000)
    if j >= 0:
        k = j + len("Private-MAC:")
        while k < len(text) and text[k] in " \t":
            k += 1
        while k < len(text) and text[k] in "0123456789abcdefABCDEF":
            k += 1
        out.append((i, k, PRIVATE_KEY))
    else:  # cut short: the header line, then what looks like key material
        first = text.find("\n", i)
        out.append((i, _PEM_TAIL.match(text, len(text) if first < 0 else first).end(), PRIVATE_KEY))


# --------------------------------------------------------------------------------------------
# The scan

# keyword → (handler kind); found in the lower-cased text
_KEYWORDS = ("key", "secret", "token", "pass", "pwd", "auth", "cred", "sig", "pat", "bearer", "://",
             "curl", "cookie", "mysql", "-----begin ", *_PIVOTS)
# rarest first: each keyword is looked for at its rarest character, so the regex engine stops only there
_RARITY = "~$+qjz9xkvbywgpfmucdlhrsnioate:/_.- 0123456789"


def _keyword_regex() -> tuple[re.Pattern, dict[str, tuple[str, int]]]:
    """One pass over the lower-cased text for every keyword: ``k(?=ey)|(?<=to)k(?=en)|…`` grouped by
    that character; a named group tells which keyword, and how far before the match it starts."""
    by_char: dict[str, list[str]] = {}
    names: dict[str, tuple[str, int]] = {}
    for n, kw in enumerate(_KEYWORDS):
        i = min(range(len(kw)), key=lambda j: _RARITY.index(kw[j]))
        group = f"k{n}"
        names[group] = (kw, i)
        look = (f"(?<={re.escape(kw[:i + 1])})" if i else "") + (f"(?={re.escape(kw[i + 1:])})" if kw[i + 1:] else "")
        by_char.setdefault(kw[i], []).append(f"(?P<{group}>{look})")
    return re.compile("|".join(re.escape(c) + "(?:" + "|".join(alts) + ")" for c, alts in by_char.items())), names


_KW_RX, _KW_GROUPS = _keyword_regex()


def _keyword_automaton():
    """The keywords as one Aho-Corasick automaton over bytes (``ahocorasick_rs``, a Rust
    automaton with a SIMD prefilter: ~4x faster than ``_KW_RX`` on logs), or None without it."""
    try:
        import ahocorasick_rs
    except ImportError:
        return None
    return ahocorasick_rs.BytesAhoCorasick([kw.encode("ascii") for kw in _KEYWORDS])


_KW_AC = _keyword_automaton()


def _keyword_hits(low: str) -> list[tuple[int, str]]:
    """Every occurrence ``(start, keyword)`` of every keyword in ``low`` (the lower-cased text),
    overlapping ones too, in no particular order. With the automaton: its overlapping matches in
    a copy of ``low`` with one byte a character (``?`` for any other than ASCII, which is in no
    keyword, so the matches and their positions are those in ``low``); else ``_KW_RX``'s matches,
    one at each keyword's rarest character (no two keywords can match at one such character)."""
    if _KW_AC is not None:
        kws = _KEYWORDS
        return [(j, kws[i]) for i, j, _e in
                _KW_AC.find_matches_as_indexes(low.encode("ascii", "replace"), overlapping=True)]
    groups = _KW_GROUPS
    out = []
    for m in _KW_RX.finditer(low):
        kw, back = groups[m.lastgroup]
        out.append((m.start() - back, kw))
    return out
# after these keywords a lower-case letter means another word (``keys``, ``tokenizer``, ``author``,
# ``passed``, ``credit``, ``assign``), except for these continuations
_GOES_ON = {"pass": ("word", "wd", "phrase", "code"), "auth": ("orization", "token", "key"),
            "cred": ("ential", "s"), "sig": ("nature",), "secret": ("key",), "token": (), "key": (), "pwd": (),
            "pat": ()}
_ASSIGN_KW = frozenset(_GOES_ON)


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """The spans of ``text`` that redaction replaces, as sorted ``(start, end, rule)``; overlapping
    finds are merged (the first rule in ``RULES`` order of the merged ones names the span)."""
    found: list[tuple[int, int, str]] = []
    n = len(text)
    # 1. tokens with a shape of their own, from the runs of token characters
    by2, by1 = _BY2, _BY1
    for p in _run_starts(text):
        cands = by2.get(text[p:p + 2]) or by1.get(text[p])
        if cands is None and p and text[p - 1] == "\\" and text[p] in "ntr":
            p += 1  # ``\nghp_…`` in JSON-escaped text
            cands = by2.get(text[p:p + 2]) or by1.get(text[p])
        if cands is None:
            continue
        for rx, rule in cands:
            t = rx.match(text, p)
            if t is None:
                continue
            if "v" in rx.groupindex:
                found.append((t.start("v"), t.end("v"), rule))
            elif not _fake(t.group()):
                found.append((t.start(), t.end(), rule))
            break
    # 2. keywords (found in one pass, lower-cased): names of secrets, headers, URLs, command lines,
    # private-key blocks, and the literals in the middle of some tokens (``_PIVOTS``)
    low = text.lower()
    if len(low) != n:  # a few characters lower-case to two (``İ``): keep positions aligned
        low = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    hits = []
    add = hits.append
    for j, kw in _keyword_hits(low):
        goes_on = _GOES_ON.get(kw)
        if goes_on is not None:  # a name's keyword: skip the words it is only part of
            k = j + len(kw)
            if "a" <= (text[k] if k < n else "") <= "z" and not (kw == "auth" and low.startswith("orization", k)) \
                    and not any(low.startswith(g, k) for g in goes_on):
                continue
            if kw == "pat" and text[j] != "P" and not (j and text[j - 1] in "_-"):
                continue  # ``path``, ``compat``: only ``_PAT``, ``-pat``, ``DevopsPat``
            if kw == "sig" and not (j and text[j - 1] in "?&;-_"):
                continue  # ``assign``, ``design``: signatures are read from URL queries and connection strings
        add((j, kw))
    if hits:
        hits.sort()
        done = [0, 0, 0]  # read up to: names and values, curl command lines, Authorization headers
        pem_end = [None, -1]
        for j, kw in hits:
            if kw in _ASSIGN_KW:
                if kw == "auth" and low.startswith("orization", j + 4):
                    _auth_header(text, j, found, done)
                else:
                    _assignment(text, j, len(kw), found, done)
            elif kw == "://":
                _url(text, j, found)
            elif kw == "bearer":
                _bearer(text, j, found)
            elif kw == "curl":
                _curl(text, j, found, done)
            elif kw == "cookie":
                _cookie(text, j, found)
            elif kw == "mysql":
                _dash_p(text, j, found)
            elif kw == "-----begin ":
                _pem(text, j, found, pem_end)
            else:  # a pivot: its literal is case-sensitive
                lit, back, rx, rule = _PIVOTS[kw]
                if text.startswith(lit, j):
                    t = rx.search(text, max(0, j - back - 1), j + len(lit) + 8192)
                    if t is not None and not _fake(t.group()):
                        found.append((t.start(), t.end(), rule))
    if not found:
        return []
    return _merge(found)


_ORDER = {name: i for i, name in enumerate(RULES)}


def _merge(found: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    found.sort()
    out: list[list] = []
    for s, e, rule in found:
        if s >= e:
            continue
        if out and s < out[-1][1]:
            last = out[-1]
            last[1] = max(last[1], e)
            if _rank(rule) < _rank(last[2]):
                last[2] = rule
        else:
            out.append([s, e, rule])
    return [tuple(x) for x in out]


def _rank(rule: str) -> int:
    # the generic rules name a span only when no specific rule found it
    return _ORDER[rule] + (1000 if rule in (PASSWORD, SECRET, SIGNATURE, AUTH_HEADER, COOKIE) else 0)


def redact_text(text: str) -> tuple[str, int]:
    """Return ``(redacted_text, count)``. Harness logs repeat the same texts (whole files re-read,
    tool output echoed): results for long texts are memoised."""
    if not text or len(text) < 8:
        return text, 0
    if len(text) >= 256:
        return _redact_cached(text)
    return _redact_short(text)


def _held_bytes(text: str) -> int:
    """What keeping ``text`` costs: its object (1, 2 or 4 bytes a character, as its widest
    character needs) and, for a text that is not ASCII, about as much again for the UTF-8 copy
    CPython caches in the string once it is encoded (writing its event's line does that)."""
    n = sys.getsizeof(text)
    return n if text.isascii() else 2 * n


class _TextCache:
    """``_redact`` memoised for long texts, least recently used first out, bounded by the bytes
    held (``max_bytes``: the texts and the redacted copies that differ, ``_held_bytes``) rather
    than by a count — 2,048 whole files re-read were hundreds of MB kept for the whole ingest —
    or by characters, which a text of wide characters holds several bytes each of. A text
    bigger than an eighth of the bound is not kept. Thread-safe."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.held = 0
        # text → (its ``_redact`` answer, the bytes counted for it)
        self.items: collections.OrderedDict[str, tuple[tuple[str, int], int]] = collections.OrderedDict()
        self.lock = threading.Lock()

    def __call__(self, text: str) -> tuple[str, int]:
        with self.lock:
            hit = self.items.get(text)
            if hit is not None:
                self.items.move_to_end(text)
                return hit[0]
        res = _redact(text)
        size = _held_bytes(text) + (_held_bytes(res[0]) if res[0] is not text else 0)
        if size <= self.max_bytes // 8:
            with self.lock:
                if text not in self.items:
                    self.items[text] = (res, size)
                    self.held += size
                while self.held > self.max_bytes:
                    self.held -= self.items.popitem(last=False)[1][1]
        return res

    def cache_clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.held = 0


_redact_cached = _TextCache(32 << 20)


@functools.lru_cache(maxsize=8192)
def _redact_short(text: str) -> tuple[str, int]:  # short texts repeat most (tool names, "ok", paths)
    return _redact(text)


def clear_memos() -> None:
    """Forget every text ``redact_text`` memoised (long and short): for a phase that redacts
    nothing (a later call fills them again)."""
    _redact_cached.cache_clear()
    _redact_short.cache_clear()


def _redact(text: str) -> tuple[str, int]:
    spans = find_secrets(text)
    if not spans:
        return text, 0
    parts, last = [], 0
    for s, e, rule in spans:
        parts.append(text[last:s])
        parts.append(f"[REDACTED:{rule}]")
        last = e
    parts.append(text[last:])
    return "".join(parts), len(spans)


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


def rules_markdown() -> str:
    """The rule table of docs/security.md (a test keeps the two equal): the rules that read names
    and structures first, then the token formats."""
    first = (PRIVATE_KEY, PASSWORD, SECRET, SIGNATURE, URL_CREDENTIALS, WEBHOOK, BEARER, BASIC, AUTH_HEADER,
             COOKIE, CURL_USER, CLI_PASSWORD, "jwt")
    rows = ["| rule (`[REDACTED:<rule>]`) | finds | stands for (public scanner rules) |", "|---|---|---|"]
    for r in [RULES[n] for n in first] + [r for r in RULES.values() if r.name not in first]:
        rows.append(f"| `{r.name}` | {r.finds} | {r.sources or '—'} |")
    return "\n".join(rows) + "\n"
