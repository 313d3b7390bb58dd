"""Writes ``secrets.jsonl``: synthetic, format-valid secrets, one per line, for the redaction
recall corpus (``tests/unit/test_redact_corpus.py``).

    python tests/data/secrets/make_secrets.py      # rewrites secrets.jsonl (deterministic)

Every value is random (a fixed seed), shaped like the real thing: the formats come from public
secret-scanner rule sets (gitleaks ``config/gitleaks.toml``, trufflehog ``pkg/detectors``, Yelp
detect-secrets ``detect_secrets/plugins``) and providers' own documentation. None is a real
credential: the random parts are drawn here, checksums (where a format has one) are not computed.

Fields of a record:

``id``      the format, unique;
``family``  the group a per-family recall report sums over;
``source``  the scanner rule(s) the format is taken from (``gitleaks:<id>``, ``trufflehog:<dir>``,
            ``detect-secrets:<plugin>``, ``doc:<provider>``);
``kind``    how the value is written in a log, which decides where the corpus places it:
            ``token``   recognisable on its own (a distinctive prefix or shape),
            ``keyed``   only recognisable next to its name (``DATADOG_API_KEY=<32 hex>``),
            ``url``     a URL that carries the secret (webhooks, signed URLs, credentials in URLs),
            ``connstr`` a connection string (``...;AccountKey=...;``),
            ``block``   a multi-line private key,
            ``cmd``     a command line carrying it (``curl -u user:pw``),
            ``header``  an HTTP header line;
``name``    the variable it is assigned to in ``.env`` / YAML / JSON places;
``value``   what is written;
``secret``  the part of ``value`` that must not survive redaction (default: ``value`` without its
            literal prefix, the part up to the last ``_ - . :`` in its first 16 characters).
"""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

HERE = Path(__file__).resolve().parent
R = random.Random(20240611)

ALNUM = string.ascii_letters + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
BASE32 = string.ascii_uppercase + "234567"
BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


def pick(chars: str, n: int) -> str:
    return "".join(R.choice(chars) for _ in range(n))


def alnum(n): return pick(ALNUM, n)
def lalnum(n): return pick(LOWER_ALNUM, n)
def ualnum(n): return pick(UPPER_ALNUM, n)
def hexs(n): return pick(HEX, n)
def uhex(n): return pick(HEX.upper(), n)
def digits(n): return pick(string.digits, n)
def letters(n): return pick(string.ascii_letters, n)
def b64(n): return pick(B64, n)
def b64url(n): return pick(B64URL, n)


def uuid() -> str:
    h = hexs(32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def password() -> str:
    """A human-made-looking password: words, digits, symbols (a '#' in some)."""
    words = ["Summer", "Tiger", "Orchid", "Falcon", "Maple", "Quartz", "Nimbus", "Cobalt", "Velvet"]
    sym = R.choice("!@#$%^&*#")
    return f"{R.choice(words)}{sym}{digits(R.randint(2, 4))}{R.choice(words).lower()}{R.choice('#!?')}"


RECORDS: list[dict] = []


def add(id, family, source, kind, name, value, secret=None):
    rec = {"id": id, "family": family, "source": source, "kind": kind, "name": name, "value": value}
    if secret is None and kind in ("token", "keyed"):
        # a format's literal prefix (``rubygems_``, ``sk-ant-api03-``) is public: the rest is the secret
        head = value[:16]
        cut = max(head.rfind("_"), head.rfind("-"), head.rfind("."), head.rfind(":"))
        if cut >= 0 and len(value) - cut - 1 >= 16:
            secret = value[cut + 1:]
    if secret is not None and secret != value:
        assert secret in value, (id, secret, value)
        rec["secret"] = secret
    RECORDS.append(rec)


def pem(label: str, lines: int = 6) -> str:
    body = "\n".join(b64(64) for _ in range(lines)) + "\n" + b64(R.randint(20, 60)) + "=="
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


def build() -> None:
    # --- AI providers -----------------------------------------------------------------------
    add("anthropic-api-key", "ai", "gitleaks:anthropic-api-key", "token", "ANTHROPIC_API_KEY",
        "sk-ant-api03-" + b64url(93) + "AA")
    add("anthropic-admin-key", "ai", "gitleaks:anthropic-admin-api-key", "token", "ANTHROPIC_ADMIN_KEY",
        "sk-ant-admin01-" + b64url(93) + "AA")
    add("openai-legacy-key", "ai", "gitleaks:openai-api-key", "token", "OPENAI_API_KEY",
        "sk-" + alnum(20) + "T3BlbkFJ" + alnum(20))
    add("openai-project-key", "ai", "gitleaks:openai-api-key", "token", "OPENAI_API_KEY",
        "sk-proj-" + b64url(74) + "T3BlbkFJ" + b64url(74))
    add("openai-svcacct-key", "ai", "gitleaks:openai-api-key", "token", "OPENAI_API_KEY",
        "sk-svcacct-" + b64url(58) + "T3BlbkFJ" + b64url(58))
    add("openai-admin-key", "ai", "gitleaks:openai-api-key", "token", "OPENAI_ADMIN_KEY",
        "sk-admin-" + b64url(58) + "T3BlbkFJ" + b64url(58))
    add("openai-48-key", "ai", "doc:openai (pre-2024 keys)", "token", "OPENAI_API_KEY", "sk-" + alnum(48))
    add("deepseek-key", "ai", "doc:deepseek", "token", "DEEPSEEK_API_KEY", "sk-" + hexs(32))
    add("openrouter-key", "ai", "trufflehog:openrouter", "token", "OPENROUTER_API_KEY", "sk-or-v1-" + hexs(64))
    add("groq-key", "ai", "trufflehog:groq", "token", "GROQ_API_KEY", "gsk_" + alnum(52))
    add("xai-key", "ai", "trufflehog:xai", "token", "XAI_API_KEY", "xai-" + alnum(80))
    add("perplexity-key", "ai", "gitleaks:perplexity-api-key", "token", "PERPLEXITY_API_KEY", "pplx-" + alnum(48))
    add("replicate-token", "ai", "trufflehog:replicate", "token", "REPLICATE_API_TOKEN", "r8_" + alnum(37))
    add("huggingface-token", "ai", "gitleaks:huggingface-access-token", "token", "HF_TOKEN", "hf_" + letters(34))
    add("huggingface-org-token", "ai", "gitleaks:huggingface-organization-api-token", "token", "HF_ORG_TOKEN",
        "api_org_" + letters(34))
    add("langsmith-key", "ai", "trufflehog:langsmith", "token", "LANGSMITH_API_KEY",
        "lsv2_pt_" + hexs(32) + "_" + hexs(10))
    add("google-api-key", "ai", "gitleaks:gcp-api-key", "token", "GEMINI_API_KEY", "AIza" + b64url(35))
    add("mistral-key", "ai", "trufflehog:mistral", "keyed", "MISTRAL_API_KEY", alnum(32))
    add("cohere-key", "ai", "gitleaks:cohere-api-token", "keyed", "COHERE_API_KEY", alnum(40))
    add("azure-openai-key", "ai", "trufflehog:azure_openai", "keyed", "AZURE_OPENAI_API_KEY", hexs(32))

    # --- cloud --------------------------------------------------------------------------------
    add("aws-access-key-id", "aws", "gitleaks:aws-access-token", "token", "AWS_ACCESS_KEY_ID",
        "AKIA" + pick(BASE32, 16))
    add("aws-temp-access-key-id", "aws", "gitleaks:aws-access-token", "token", "AWS_ACCESS_KEY_ID",
        "ASIA" + pick(BASE32, 16))
    add("aws-secret-access-key", "aws", "trufflehog:aws", "keyed", "AWS_SECRET_ACCESS_KEY", b64(40))
    add("aws-session-token", "aws", "trufflehog:aws_session_keys", "token", "AWS_SESSION_TOKEN",
        "IQoJb3JpZ2luX2VjE" + b64(340))
    add("aws-bedrock-key", "aws", "gitleaks:aws-amazon-bedrock-api-key-long-lived", "token",
        "AWS_BEARER_TOKEN_BEDROCK",
        "ABSK" + base64.b64encode(b"BedrockAPIKey-" + alnum(8).encode() + b"-at-" + digits(12).encode() + b":"
                                  + b64(60).encode()).decode())
    s3sig = hexs(64)
    add("aws-presigned-url", "aws", "doc:aws sigv4 query auth", "url", "DOWNLOAD_URL",
        "https://acme-builds.s3.us-east-1.amazonaws.com/releases/app.tar.gz?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Credential=ASIA" + pick(BASE32, 16) + "%2F20250101%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=" + s3sig,
        secret=s3sig)
    add("gcp-oauth-client-secret", "gcp", "trufflehog:gcpapplicationdefaultcredentials", "token",
        "GOOGLE_CLIENT_SECRET", "GOCSPX-" + b64url(28))
    add("google-oauth-access-token", "gcp", "trufflehog:googleoauth2", "token", "GOOGLE_ACCESS_TOKEN",
        "ya29." + b64url(150))
    add("google-oauth-refresh-token", "gcp", "doc:google oauth2", "token", "GOOGLE_REFRESH_TOKEN",
        "1//0" + b64url(99))
    gsig = hexs(512)
    add("gcs-signed-url", "gcp", "doc:gcs v4 signed url", "url", "SIGNED_URL",
        "https://storage.googleapis.com/acme-data/exports/q3.csv?X-Goog-Algorithm=GOOG4-RSA-SHA256"
        "&X-Goog-Credential=exporter%40acme.iam.gserviceaccount.com%2F20250101%2Fauto%2Fstorage%2Fgoog4_request"
        "&X-Goog-Date=20250101T000000Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host&X-Goog-Signature=" + gsig,
        secret=gsig)
    acct = b64(86) + "=="
    add("azure-storage-connstr", "azure", "detect-secrets:AzureStorageKeyDetector", "connstr",
        "AZURE_STORAGE_CONNECTION_STRING",
        f"DefaultEndpointsProtocol=https;AccountName=acmestore;AccountKey={acct};EndpointSuffix=core.windows.net",
        secret=acct)
    sas = b64(43) + "%3D"
    add("azure-sas-url", "azure", "trufflehog:azuresastoken", "url", "BLOB_SAS_URL",
        "https://acmestore.blob.core.windows.net/backups/db.bak?sv=2022-11-02&ss=b&srt=o&sp=r"
        "&se=2026-01-01T00:00:00Z&st=2025-01-01T00:00:00Z&spr=https&sig=" + sas, secret=sas[:-3])
    sbk = b64(43) + "="
    add("azure-servicebus-connstr", "azure", "trufflehog:azure_servicebus", "connstr",
        "SERVICEBUS_CONNECTION_STRING",
        f"Endpoint=sb://acme-bus.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
        f"SharedAccessKey={sbk}", secret=sbk)
    iot = b64(43) + "="
    add("azure-iothub-connstr", "azure", "trufflehog:azure_iot", "connstr", "IOTHUB_CONNECTION_STRING",
        f"HostName=acme-hub.azure-devices.net;SharedAccessKeyName=iothubowner;SharedAccessKey={iot}",
        secret=iot)
    cos = b64(86) + "=="
    add("azure-cosmos-connstr", "azure", "trufflehog:azure_cosmosdb", "connstr", "COSMOS_CONNECTION_STRING",
        f"AccountEndpoint=https://acme-cosmos.documents.azure.com:443/;AccountKey={cos};", secret=cos)
    sqlpw = password()
    add("azure-sql-connstr", "azure", "trufflehog:sqlserver", "connstr", "SQL_CONNECTION_STRING",
        f"Server=tcp:acme-sql.database.windows.net,1433;Initial Catalog=app;User ID=appadmin;Password={sqlpw};"
        "Encrypt=True;Connection Timeout=30;", secret=sqlpw)
    rpw = b64(43) + "="
    add("azure-redis-connstr", "azure", "trufflehog:redis", "connstr", "REDIS_CONNECTION",
        f"acme-cache.redis.cache.windows.net:6380,password={rpw},ssl=True,abortConnect=False", secret=rpw)
    add("azure-ad-client-secret", "azure", "gitleaks:azure-ad-client-secret", "token", "AZURE_CLIENT_SECRET",
        alnum(3) + digits(1) + "Q~" + b64url(34).replace("-", "."))
    add("azure-acr-password", "azure", "trufflehog:azurecontainerregistry", "token", "ACR_PASSWORD",
        alnum(42) + "+ACR" + alnum(6))
    add("azure-devops-pat", "azure", "trufflehog:azuredevopspersonalaccesstoken", "keyed", "AZURE_DEVOPS_PAT",
        pick("abcdefghijklmnopqrstuvwxyz234567", 52))
    apim = hexs(32)
    add("azure-subscription-key", "azure", "doc:azure api management", "header", "APIM_KEY",
        "Ocp-Apim-Subscription-Key: " + apim, secret=apim)
    add("alibaba-access-key-id", "cloud", "gitleaks:alibaba-access-key-id", "token", "ALIBABA_ACCESS_KEY_ID",
        "LTAI" + alnum(20))
    add("alibaba-secret-key", "cloud", "gitleaks:alibaba-secret-key", "keyed", "ALIBABA_SECRET_KEY", alnum(30))
    add("digitalocean-pat", "cloud", "gitleaks:digitalocean-pat", "token", "DIGITALOCEAN_TOKEN", "dop_v1_" + hexs(64))
    add("digitalocean-oauth", "cloud", "gitleaks:digitalocean-access-token", "token", "DO_OAUTH_TOKEN",
        "doo_v1_" + hexs(64))
    add("digitalocean-refresh", "cloud", "gitleaks:digitalocean-refresh-token", "token", "DO_REFRESH_TOKEN",
        "dor_v1_" + hexs(64))
    add("heroku-key-v2", "cloud", "gitleaks:heroku-api-key-v2", "token", "HEROKU_API_KEY", "HRKU-AA" + b64url(58))
    add("heroku-key-uuid", "cloud", "gitleaks:heroku-api-key", "keyed", "HEROKU_API_KEY", uuid())
    add("cloudflare-api-token", "cloud", "gitleaks:cloudflare-api-key", "keyed", "CLOUDFLARE_API_TOKEN", b64url(40))
    add("cloudflare-global-key", "cloud", "gitleaks:cloudflare-global-api-key", "keyed", "CF_API_KEY", hexs(37))
    add("cloudflare-origin-ca-key", "cloud", "gitleaks:cloudflare-origin-ca-key", "token", "CF_ORIGIN_CA_KEY",
        "v1.0-" + hexs(24) + "-" + hexs(146))
    add("flyio-token", "cloud", "gitleaks:flyio-access-token", "token", "FLY_API_TOKEN", "fo1_" + b64url(43))
    add("flyio-macaroon", "cloud", "gitleaks:flyio-access-token", "token", "FLY_API_TOKEN", "fm2_" + b64(180))
    add("vercel-token", "cloud", "trufflehog:vercel", "keyed", "VERCEL_TOKEN", alnum(24))
    add("netlify-token", "cloud", "gitleaks:netlify-access-token", "keyed", "NETLIFY_AUTH_TOKEN", b64url(43))
    add("supabase-pat", "cloud", "trufflehog:supabasetoken", "token", "SUPABASE_ACCESS_TOKEN", "sbp_" + hexs(40))
    add("vault-service-token", "cloud", "gitleaks:vault-service-token", "token", "VAULT_TOKEN", "hvs." + b64url(95))
    add("vault-batch-token", "cloud", "gitleaks:vault-batch-token", "token", "VAULT_TOKEN", "hvb." + b64url(150))
    add("vault-legacy-token", "cloud", "gitleaks:vault-service-token", "keyed", "VAULT_TOKEN", "s." + alnum(24))
    add("terraform-cloud-token", "cloud", "gitleaks:hashicorp-tf-api-token", "token", "TFE_TOKEN",
        lalnum(14) + ".atlasv1." + b64url(67))
    add("pulumi-token", "cloud", "gitleaks:pulumi-api-token", "token", "PULUMI_ACCESS_TOKEN", "pul-" + hexs(40))
    add("doppler-token", "cloud", "gitleaks:doppler-api-token", "token", "DOPPLER_TOKEN", "dp.pt." + alnum(43))
    add("databricks-token", "cloud", "gitleaks:databricks-api-token", "token", "DATABRICKS_TOKEN", "dapi" + hexs(32))
    add("planetscale-token", "cloud", "gitleaks:planetscale-api-token", "token", "PLANETSCALE_TOKEN",
        "pscale_tkn_" + b64url(43))
    add("planetscale-password", "cloud", "gitleaks:planetscale-password", "token", "DATABASE_PASSWORD",
        "pscale_pw_" + b64url(43))
    add("scalingo-token", "cloud", "gitleaks:scalingo-api-token", "token", "SCALINGO_API_TOKEN", "tk-us-" + b64url(48))
    add("tailscale-authkey", "cloud", "trufflehog:tailscale", "token", "TS_AUTHKEY",
        "tskey-auth-k" + alnum(10) + "CNTRL-" + alnum(33))
    add("age-secret-key", "cloud", "gitleaks:age-secret-key", "token", "SOPS_AGE_KEY",
        "AGE-SECRET-KEY-1" + pick(BECH32.upper(), 58))
    add("onepassword-secret-key", "cloud", "gitleaks:1password-secret-key", "token", "OP_SECRET_KEY",
        "A3-" + ualnum(6) + "-" + ualnum(11) + "-" + ualnum(5) + "-" + ualnum(5) + "-" + ualnum(5))
    add("onepassword-sa-token", "cloud", "gitleaks:1password-service-account-token", "token",
        "OP_SERVICE_ACCOUNT_TOKEN", "ops_" + base64.b64encode(json.dumps(
            {"signInAddress": "my.1password.com", "userAuth": {"method": "SRPg-4096", "alg": "PBES2g-HS256",
             "iterations": 650000, "salt": b64url(22)}, "email": lalnum(12) + "@1passwordserviceaccounts.com",
             "srpX": hexs(64), "muk": {"alg": "A256GCM", "k": b64url(43)}, "secretKey": "A3-" + ualnum(30),
             "deviceUuid": lalnum(26)}).encode()).decode())
    add("firebase-fcm-server-key", "cloud", "trufflehog:firebasecloudmessaging", "token", "FCM_SERVER_KEY",
        "AAAA" + b64url(7) + ":APA91b" + b64url(134))
    add("salesforce-access-token", "cloud", "trufflehog:salesforce", "token", "SF_ACCESS_TOKEN",
        "00D" + alnum(15) + "!AQ" + alnum(94))

    # --- code hosting, CI, registries ---------------------------------------------------------
    add("github-pat", "git", "gitleaks:github-pat", "token", "GITHUB_TOKEN", "ghp_" + alnum(36))
    add("github-oauth", "git", "gitleaks:github-oauth", "token", "GH_OAUTH_TOKEN", "gho_" + alnum(36))
    add("github-user-to-server", "git", "gitleaks:github-app-token", "token", "GH_TOKEN", "ghu_" + alnum(36))
    add("github-server-to-server", "git", "gitleaks:github-app-token", "token", "GITHUB_APP_TOKEN", "ghs_" + alnum(36))
    add("github-refresh", "git", "gitleaks:github-refresh-token", "token", "GH_REFRESH_TOKEN", "ghr_" + alnum(36))
    add("github-fine-grained-pat", "git", "gitleaks:github-fine-grained-pat", "token", "GITHUB_TOKEN",
        "github_pat_11" + ualnum(20) + "_" + alnum(59))
    add("gitlab-pat", "git", "gitleaks:gitlab-pat", "token", "GITLAB_TOKEN", "glpat-" + b64url(20))
    add("gitlab-pat-routable", "git", "gitleaks:gitlab-pat-routable", "token", "GITLAB_TOKEN",
        "glpat-" + b64url(40) + ".01." + lalnum(9))
    add("gitlab-deploy-token", "git", "gitleaks:gitlab-deploy-token", "token", "CI_DEPLOY_PASSWORD",
        "gldt-" + b64url(20))
    add("gitlab-runner-token", "git", "gitleaks:gitlab-runner-authentication-token", "token", "RUNNER_TOKEN",
        "glrt-" + b64url(20))
    add("gitlab-trigger-token", "git", "gitleaks:gitlab-ptt", "token", "TRIGGER_TOKEN", "glptt-" + hexs(40))
    add("gitlab-cicd-job-token", "git", "gitleaks:gitlab-cicd-job-token", "token", "CI_JOB_TOKEN",
        "glcbt-" + alnum(3) + "_" + b64url(20))
    add("gitlab-oauth-secret", "git", "gitleaks:gitlab-oauth-app-secret", "token", "GITLAB_APP_SECRET",
        "gloas-" + b64url(64))
    add("gitlab-runner-registration", "git", "gitleaks:gitlab-rrt", "token", "REGISTRATION_TOKEN",
        "GR1348941" + b64url(20))
    add("bitbucket-app-password", "git", "trufflehog:bitbucketapppassword", "token", "BITBUCKET_APP_PASSWORD",
        "ATBB" + alnum(32))
    add("atlassian-api-token", "git", "gitleaks:atlassian-api-token", "token", "JIRA_API_TOKEN",
        "ATATT3" + b64url(186))
    add("npm-token", "registry", "gitleaks:npm-access-token", "token", "NPM_TOKEN", "npm_" + alnum(36))
    npm_legacy = uuid()
    add("npmrc-legacy-token", "registry", "detect-secrets:NpmDetector", "cmd", "NPMRC",
        f"//registry.npmjs.org/:_authToken={npm_legacy}", secret=npm_legacy)
    add("pypi-token", "registry", "gitleaks:pypi-upload-token", "token", "TWINE_PASSWORD",
        "pypi-AgEIcHlwaS5vcmc" + b64url(150))
    add("testpypi-token", "registry", "detect-secrets:PypiTokenDetector", "token", "TEST_PYPI_TOKEN",
        "pypi-AgENdGVzdC5weXBpLm9yZw" + b64url(150))
    add("rubygems-key", "registry", "gitleaks:rubygems-api-token", "token", "GEM_HOST_API_KEY", "rubygems_" + hexs(48))
    add("clojars-token", "registry", "gitleaks:clojars-api-token", "token", "CLOJARS_PASSWORD", "CLOJARS_" + lalnum(60))
    add("nuget-key", "registry", "trufflehog:nugetapikey", "token", "NUGET_API_KEY", "oy2" + lalnum(43))
    add("dockerhub-pat", "registry", "trufflehog:dockerhub", "token", "DOCKERHUB_TOKEN", "dckr_pat_" + b64url(27))
    add("artifactory-api-key", "registry", "gitleaks:artifactory-api-key", "token", "ARTIFACTORY_API_KEY",
        "AKCp" + alnum(69))
    add("artifactory-reference-token", "registry", "gitleaks:artifactory-reference-token", "token",
        "ARTIFACTORY_TOKEN", "cmVmdGtuOjAxOj" + alnum(50))
    add("sonarqube-token", "ci", "gitleaks:sonar-api-token", "token", "SONAR_TOKEN", "squ_" + hexs(40))
    add("snyk-token", "ci", "gitleaks:snyk-api-token", "keyed", "SNYK_TOKEN", uuid())
    add("codecov-token", "ci", "gitleaks:codecov-access-token", "keyed", "CODECOV_TOKEN", uuid())
    add("circleci-pat", "ci", "trufflehog:circleci", "token", "CIRCLE_TOKEN", "CCIPAT_" + alnum(22) + "_" + hexs(40))
    add("travis-token", "ci", "gitleaks:travisci-access-token", "keyed", "TRAVIS_API_TOKEN", alnum(22))
    add("drone-token", "ci", "gitleaks:droneci-access-token", "keyed", "DRONE_TOKEN", alnum(32))
    add("buildkite-token", "ci", "trufflehog:buildkite", "token", "BUILDKITE_API_TOKEN", "bkua_" + hexs(40))
    add("jenkins-api-token", "ci", "trufflehog:jenkins", "keyed", "JENKINS_API_TOKEN", "11" + hexs(32))
    add("sentry-user-token", "ops", "gitleaks:sentry-user-token", "token", "SENTRY_AUTH_TOKEN", "sntryu_" + hexs(64))
    add("sentry-org-token", "ops", "gitleaks:sentry-org-token", "token", "SENTRY_AUTH_TOKEN",
        "sntrys_eyJpYXQiO" + b64(40) + "LCJyZWdpb25fdXJs" + b64(60) + "_" + b64(43))
    add("sentry-legacy-token", "ops", "gitleaks:sentry-access-token", "keyed", "SENTRY_AUTH_TOKEN", hexs(64))
    add("linear-key", "saas", "gitleaks:linear-api-key", "token", "LINEAR_API_KEY", "lin_api_" + alnum(40))
    add("notion-token", "saas", "gitleaks:notion-api-token", "token", "NOTION_TOKEN", "ntn_" + digits(11) + alnum(35))
    add("notion-legacy-secret", "saas", "doc:notion internal integration", "token", "NOTION_API_KEY",
        "secret_" + alnum(43))
    add("postman-key", "saas", "gitleaks:postman-api-token", "token", "POSTMAN_API_KEY",
        "PMAK-" + hexs(24) + "-" + hexs(34))
    add("readme-key", "saas", "gitleaks:readme-api-token", "token", "README_API_KEY", "rdme_" + lalnum(70))
    add("prefect-key", "saas", "gitleaks:prefect-api-token", "token", "PREFECT_API_KEY", "pnu_" + alnum(36))
    add("infracost-key", "saas", "gitleaks:infracost-api-token", "token", "INFRACOST_API_KEY", "ico-" + alnum(32))
    add("grafana-cloud-token", "ops", "gitleaks:grafana-cloud-api-token", "token", "GRAFANA_CLOUD_TOKEN",
        "glc_" + base64.b64encode(json.dumps({"o": digits(6), "n": "stack-" + digits(6) + "-hm-read-" + lalnum(6),
                                              "k": alnum(24), "m": {"r": "prod-us-east-0"}}).encode()).decode())
    add("grafana-sa-token", "ops", "gitleaks:grafana-service-account-token", "token", "GRAFANA_TOKEN",
        "glsa_" + alnum(32) + "_" + hexs(8))
    add("grafana-api-key", "ops", "gitleaks:grafana-api-key", "token", "GRAFANA_API_KEY", "eyJrIjoi" + alnum(72) + "=")
    add("newrelic-user-key", "ops", "gitleaks:new-relic-user-api-key", "token", "NEW_RELIC_API_KEY",
        "NRAK-" + ualnum(27))
    add("newrelic-insert-key", "ops", "gitleaks:new-relic-insert-key", "token", "NEW_RELIC_INSERT_KEY",
        "NRII-" + b64url(32))
    add("dynatrace-token", "ops", "gitleaks:dynatrace-api-token", "token", "DT_API_TOKEN",
        "dt0c01." + ualnum(24) + "." + ualnum(64))
    add("datadog-api-key", "ops", "gitleaks:datadog-access-token", "keyed", "DD_API_KEY", hexs(32))
    add("datadog-app-key", "ops", "gitleaks:datadog-access-token", "keyed", "DD_APP_KEY", hexs(40))
    add("launchdarkly-key", "saas", "gitleaks:launchdarkly-access-token", "keyed", "LAUNCHDARKLY_API_KEY",
        "api-" + uuid())
    add("okta-token", "saas", "gitleaks:okta-access-token", "keyed", "OKTA_API_TOKEN", "00" + b64url(40))
    add("pagerduty-token", "ops", "trufflehog:pagerdutyapikey", "keyed", "PAGERDUTY_TOKEN", "u+" + b64url(18))
    add("algolia-admin-key", "saas", "gitleaks:algolia-api-key", "keyed", "ALGOLIA_ADMIN_API_KEY", hexs(32))
    add("zendesk-token", "saas", "gitleaks:zendesk-secret-key", "keyed", "ZENDESK_API_TOKEN", alnum(40))
    add("intercom-token", "saas", "gitleaks:intercom-api-key", "keyed", "INTERCOM_ACCESS_TOKEN", b64url(59) + "=")
    add("contentful-pat", "saas", "trufflehog:contentfulpersonalaccesstoken", "token", "CONTENTFUL_MANAGEMENT_TOKEN",
        "CFPAT-" + b64url(43))
    add("figma-pat", "saas", "trufflehog:figmapersonalaccesstoken", "token", "FIGMA_TOKEN", "figd_" + b64url(40))
    add("airtable-pat", "saas", "gitleaks:airtable-personnal-access-token", "token", "AIRTABLE_API_KEY",
        "pat" + alnum(14) + "." + hexs(64))
    add("typeform-token", "saas", "gitleaks:typeform-api-token", "token", "TYPEFORM_TOKEN", "tfp_" + b64url(59))
    add("frameio-token", "saas", "gitleaks:frameio-api-token", "token", "FRAMEIO_TOKEN", "fio-u-" + b64url(64))
    add("asana-pat", "saas", "trufflehog:asanapersonalaccesstoken", "token", "ASANA_TOKEN",
        "2/" + digits(16) + "/" + digits(16) + ":" + hexs(32))
    add("shopify-access-token", "commerce", "gitleaks:shopify-access-token", "token", "SHOPIFY_ACCESS_TOKEN",
        "shpat_" + hexs(32))
    add("shopify-shared-secret", "commerce", "gitleaks:shopify-shared-secret", "token", "SHOPIFY_API_SECRET",
        "shpss_" + hexs(32))
    add("shopify-custom-app-token", "commerce", "gitleaks:shopify-custom-access-token", "token",
        "SHOPIFY_CUSTOM_TOKEN", "shpca_" + hexs(32))
    add("square-access-token", "commerce", "gitleaks:square-access-token", "token", "SQUARE_ACCESS_TOKEN",
        "EAAA" + b64url(60))
    add("square-oauth-secret", "commerce", "detect-secrets:SquareOAuthDetector", "token", "SQUARE_OAUTH_SECRET",
        "sq0csp-" + b64url(43))
    add("stripe-live-secret", "commerce", "gitleaks:stripe-access-token", "token", "STRIPE_SECRET_KEY",
        "sk_live_" + alnum(99))
    add("stripe-restricted", "commerce", "gitleaks:stripe-access-token", "token", "STRIPE_RESTRICTED_KEY",
        "rk_live_" + alnum(24))
    add("stripe-test-secret", "commerce", "gitleaks:stripe-access-token", "token", "STRIPE_SECRET_KEY",
        "sk_test_" + alnum(24))
    add("stripe-webhook-secret", "commerce", "doc:stripe webhook signing", "token", "STRIPE_WEBHOOK_SECRET",
        "whsec_" + alnum(32))
    add("braintree-token", "commerce", "trufflehog:paypaloauth", "token", "BRAINTREE_ACCESS_TOKEN",
        "access_token$production$" + lalnum(16) + "$" + hexs(32))
    add("shippo-token", "commerce", "gitleaks:shippo-api-token", "token", "SHIPPO_API_KEY", "shippo_live_" + hexs(40))
    add("easypost-key", "commerce", "gitleaks:easypost-api-token", "token", "EASYPOST_API_KEY", "EZAK" + alnum(54))
    add("duffel-token", "commerce", "gitleaks:duffel-api-token", "token", "DUFFEL_TOKEN", "duffel_live_" + b64url(43))
    add("flutterwave-secret", "commerce", "gitleaks:flutterwave-secret-key", "token", "FLW_SECRET_KEY",
        "FLWSECK_TEST-" + hexs(32) + "-X")
    add("plaid-access-token", "commerce", "gitleaks:plaid-api-token", "token", "PLAID_ACCESS_TOKEN",
        "access-production-" + uuid())
    add("lob-key", "commerce", "gitleaks:lob-api-key", "keyed", "LOB_API_KEY", "live_" + hexs(35))
    add("gocardless-token", "commerce", "gitleaks:gocardless-api-token", "keyed", "GOCARDLESS_ACCESS_TOKEN",
        "live_" + b64url(40))
    add("coinbase-secret", "commerce", "gitleaks:coinbase-access-token", "keyed", "COINBASE_API_SECRET", b64url(64))

    # --- messaging, email, webhooks ------------------------------------------------------------
    add("slack-bot-token", "chat", "gitleaks:slack-bot-token", "token", "SLACK_BOT_TOKEN",
        "xoxb-" + digits(12) + "-" + digits(13) + "-" + alnum(24))
    add("slack-user-token", "chat", "gitleaks:slack-user-token", "token", "SLACK_USER_TOKEN",
        "xoxp-" + digits(12) + "-" + digits(12) + "-" + digits(13) + "-" + hexs(32))
    add("slack-app-token", "chat", "gitleaks:slack-app-token", "token", "SLACK_APP_TOKEN",
        "xapp-1-" + ualnum(11) + "-" + digits(13) + "-" + hexs(64))
    add("slack-config-refresh", "chat", "gitleaks:slack-config-refresh-token", "token", "SLACK_CONFIG_REFRESH_TOKEN",
        "xoxe-1-" + ualnum(146))
    add("slack-legacy-workspace", "chat", "gitleaks:slack-legacy-workspace-token", "token", "SLACK_TOKEN",
        "xoxa-2-" + alnum(36))
    slack_hook = "T" + ualnum(8) + "/B" + ualnum(10) + "/" + alnum(24)
    add("slack-webhook", "webhook", "gitleaks:slack-webhook-url", "url", "SLACK_WEBHOOK_URL",
        "https://hooks.slack.com/services/" + slack_hook, secret=slack_hook.split("/")[-1])
    slack_wf = alnum(11) + "/" + digits(18) + "/" + hexs(32)
    add("slack-workflow-webhook", "webhook", "gitleaks:slack-webhook-url", "url", "SLACK_WORKFLOW_URL",
        "https://hooks.slack.com/triggers/" + slack_wf, secret=slack_wf.split("/")[-1])
    dtok = b64url(68)
    add("discord-webhook", "webhook", "trufflehog:discordwebhook", "url", "DISCORD_WEBHOOK_URL",
        f"https://discord.com/api/webhooks/{digits(19)}/{dtok}", secret=dtok)
    dtok2 = b64url(68)
    add("discordapp-webhook", "webhook", "trufflehog:discordwebhook", "url", "DISCORD_WEBHOOK",
        f"https://discordapp.com/api/webhooks/{digits(18)}/{dtok2}", secret=dtok2)
    th = hexs(32)
    add("teams-webhook", "webhook", "gitleaks:microsoft-teams-webhook", "url", "TEAMS_WEBHOOK_URL",
        f"https://acme.webhook.office.com/webhookb2/{uuid()}@{uuid()}/IncomingWebhook/{th}/{uuid()}",
        secret=th)
    wsig = b64url(43)
    add("teams-workflow-webhook", "webhook", "trufflehog:microsoftteamswebhook v2", "url", "TEAMS_FLOW_URL",
        f"https://prod-12.westus.logic.azure.com:443/workflows/{hexs(32)}/triggers/manual/paths/invoke"
        f"?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig={wsig}", secret=wsig)
    zap = digits(7) + "/" + lalnum(6)
    add("zapier-webhook", "webhook", "trufflehog:zapierwebhook", "url", "ZAPIER_HOOK_URL",
        f"https://hooks.zapier.com/hooks/catch/{zap}/", secret=zap)
    add("discord-bot-token", "chat", "detect-secrets:DiscordBotTokenDetector", "token", "DISCORD_BOT_TOKEN",
        "M" + b64url(25).replace("-", "a").replace("_", "b") + "." + b64url(6) + "." + b64url(38))
    add("telegram-bot-token", "chat", "detect-secrets:TelegramBotTokenDetector", "token", "TELEGRAM_BOT_TOKEN",
        digits(10) + ":AA" + b64url(33))
    add("twilio-api-key", "chat", "gitleaks:twilio-api-key", "token", "TWILIO_API_KEY", "SK" + hexs(32))
    add("twilio-auth-token", "chat", "trufflehog:twilio", "keyed", "TWILIO_AUTH_TOKEN", hexs(32))
    add("sendgrid-key", "email", "detect-secrets:SendGridDetector", "token", "SENDGRID_API_KEY",
        "SG." + b64url(22) + "." + b64url(43))
    add("mailgun-key", "email", "trufflehog:mailgun", "token", "MAILGUN_API_KEY", "key-" + hexs(32))
    add("mailgun-signing-key", "email", "gitleaks:mailgun-signing-key", "token", "MAILGUN_SIGNING_KEY",
        hexs(32) + "-" + hexs(8) + "-" + hexs(8))
    add("mailchimp-key", "email", "detect-secrets:MailchimpDetector", "token", "MAILCHIMP_API_KEY",
        hexs(32) + "-us" + digits(2))
    add("brevo-key", "email", "gitleaks:sendinblue-api-token", "token", "BREVO_API_KEY",
        "xkeysib-" + hexs(64) + "-" + alnum(16))
    add("postmark-token", "email", "trufflehog:postmark", "keyed", "POSTMARK_SERVER_TOKEN", uuid())
    add("twitter-bearer", "social", "gitleaks:twitter-bearer-token", "token", "TWITTER_BEARER_TOKEN",
        "A" * 22 + alnum(90))
    add("twitter-api-secret", "social", "gitleaks:twitter-api-secret", "keyed", "TWITTER_API_SECRET", alnum(50))
    add("facebook-page-token", "social", "gitleaks:facebook-page-access-token", "token", "FB_PAGE_TOKEN",
        "EAAG" + alnum(160))
    add("mapbox-secret-token", "saas", "doc:mapbox", "token", "MAPBOX_SECRET_TOKEN",
        "sk.eyJ1Ijoi" + b64url(50) + "." + b64url(22))

    # --- generic: JWT, bearer, basic, sessions ---------------------------------------------------
    def jwt() -> str:
        head = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode()
        payload = base64.urlsafe_b64encode(
            json.dumps({"sub": digits(10), "name": "svc-" + lalnum(6), "iat": 1700000000 + R.randint(0, 10**7),
                        "role": "service_role", "n": alnum(12)}).encode()).rstrip(b"=").decode()
        return f"{head}.{payload}.{b64url(43)}"

    add("jwt", "generic", "gitleaks:jwt", "token", "SUPABASE_SERVICE_ROLE_KEY", jwt())
    j2 = jwt()
    add("jwt-cookie", "generic", "doc:session cookies", "header", "COOKIE",
        f"Cookie: session={j2}; theme=dark", secret=j2.split(".", 1)[1])
    opaque = b64url(40)
    add("bearer-opaque", "generic", "gitleaks:curl-auth-header", "header", "AUTH_HEADER",
        f"Authorization: Bearer {opaque}", secret=opaque)
    basic = base64.b64encode(f"deploy:{password()}".encode()).decode()
    add("basic-auth-header", "generic", "gitleaks:curl-auth-header", "header", "AUTH_HEADER",
        f"Authorization: Basic {basic}", secret=basic)
    tok = alnum(40)
    add("token-auth-header", "generic", "doc:github rest api", "header", "AUTH_HEADER",
        f"Authorization: token {tok}", secret=tok)
    xk = alnum(40)
    add("x-api-key-header", "generic", "gitleaks:curl-auth-header", "header", "API_KEY_HEADER",
        f"x-api-key: {xk}", secret=xk)
    ak = hexs(32)
    add("api-key-header", "generic", "doc:azure openai", "header", "API_KEY_HEADER", f"api-key: {ak}", secret=ak)
    xa = b64url(32)
    add("x-auth-token-header", "generic", "doc:openstack", "header", "AUTH_HEADER", f"X-Auth-Token: {xa}", secret=xa)
    pt = "glpat-" + b64url(20)
    add("private-token-header", "generic", "doc:gitlab api", "header", "AUTH_HEADER", f"PRIVATE-TOKEN: {pt}",
        secret=pt[6:])

    # --- credentials in URLs and command lines ----------------------------------------------------
    for scheme, host, id_ in [("postgres", "db.internal:5432/app", "postgres-url"),
                              ("mysql", "mysql.internal:3306/shop", "mysql-url"),
                              ("mongodb+srv", "cluster0.ab1cd.mongodb.net/app?retryWrites=true", "mongodb-url"),
                              ("amqp", "rabbit.internal:5672/vhost", "amqp-url"),
                              ("https", "git.acme.dev/team/repo.git", "https-userinfo-url"),
                              ("ftp", "files.acme.dev/pub", "ftp-url")]:
        pw = password()
        add(id_, "url-credentials", "trufflehog:uri", "url", "DATABASE_URL" if "git" not in id_ else "REMOTE_URL",
            f"{scheme}://svc_user:{pw}@{host}", secret=pw)
    rpw = alnum(24)
    add("redis-url-no-user", "url-credentials", "trufflehog:redis", "url", "REDIS_URL",
        f"redis://:{rpw}@redis.internal:6379/0", secret=rpw)
    rpw2 = alnum(32)
    add("rediss-url", "url-credentials", "trufflehog:redis", "url", "REDIS_URL",
        f"rediss://default:{rpw2}@eu1-fine-owl-31337.upstash.io:6379", secret=rpw2)
    at_pw = "p@ss" + alnum(10) + "!"
    add("url-password-with-at", "url-credentials", "trufflehog:uri", "url", "DATABASE_URL",
        f"postgresql://admin:{at_pw}@10.0.0.12:5432/prod", secret=at_pw)
    gtok = "ghp_" + alnum(36)
    add("git-credential-url", "url-credentials", "doc:git-credential-store", "url", "GIT_REMOTE",
        f"https://x-access-token:{gtok}@github.com/acme/app.git", secret=gtok[4:])
    jpw = password()
    add("jdbc-url", "url-credentials", "trufflehog:jdbc", "url", "JDBC_URL",
        f"jdbc:postgresql://db.internal:5432/app?user=app&password={jpw}&ssl=true", secret=jpw)
    qk = alnum(32)
    add("url-query-api-key", "url-credentials", "gitleaks:generic-api-key", "url", "WEATHER_URL",
        f"https://api.weather.example.net/v1/forecast?q=Paris&api_key={qk}&units=metric", secret=qk)
    qt = b64url(40)
    add("url-query-access-token", "url-credentials", "gitleaks:generic-api-key", "url", "GRAPH_URL",
        f"https://graph.example.net/v19.0/me?fields=id,name&access_token={qt}", secret=qt)
    cpw = password()
    add("curl-user", "cmd", "gitleaks:curl-auth-user", "cmd", "CMD",
        f"curl -u admin:{cpw} https://jenkins.acme.dev/api/json", secret=cpw)
    cpw2 = alnum(20)
    add("curl-user-quoted", "cmd", "gitleaks:curl-auth-user", "cmd", "CMD",
        f"curl -s --user 'ci-bot:{cpw2}' -X POST https://nexus.acme.dev/service/rest/v1/components", secret=cpw2)
    mpw = password()
    add("mysql-p", "cmd", "doc:mysql client", "cmd", "CMD", f"mysql -h db.internal -u root -p'{mpw}' shop",
        secret=mpw)
    spw = password()
    add("sshpass", "cmd", "doc:sshpass", "cmd", "CMD", f"sshpass -p '{spw}' ssh deploy@10.0.0.5", secret=spw)
    npw = alnum(36)
    add("netrc", "cmd", "doc:netrc", "cmd", "NETRC", f"machine api.heroku.com login me@acme.dev password {npw}",
        secret=npw)
    dpw = password()
    add("docker-login-password", "cmd", "doc:docker login", "cmd", "CMD",
        f"docker login registry.acme.dev -u ci --password {dpw}", secret=dpw)
    ghpw = "ghp_" + alnum(36)
    add("docker-config-auth", "cmd", "doc:docker config.json", "cmd", "DOCKER_CONFIG",
        '{"auths": {"ghcr.io": {"auth": "' + base64.b64encode(f"acme-bot:{ghpw}".encode()).decode() + '"}}}',
        secret=base64.b64encode(f"acme-bot:{ghpw}".encode()).decode()[:40])
    bpw = hexs(8) + ":" + hexs(8)
    add("bundler-credentials", "cmd", "gitleaks:sidekiq-secret", "keyed", "BUNDLE_GEMS__CONTRIBSYS__COM", bpw)

    # --- passwords and generic secrets assigned by name -------------------------------------------
    add("db-password", "password", "detect-secrets:KeywordDetector", "keyed", "DB_PASSWORD", password())
    add("postgres-password", "password", "detect-secrets:KeywordDetector", "keyed", "POSTGRES_PASSWORD", password())
    add("password-with-hash", "password", "detect-secrets:KeywordDetector", "keyed", "SMTP_PASSWORD",
        "x7#" + alnum(9) + "#q")
    add("root-password", "password", "gitleaks:generic-api-key", "keyed", "MYSQL_ROOT_PASSWORD", password())
    add("passphrase", "password", "detect-secrets:KeywordDetector", "keyed", "GPG_PASSPHRASE", password())
    add("pwd", "password", "detect-secrets:KeywordDetector", "keyed", "LDAP_PWD", password())
    add("spring-datasource-password", "password", "gitleaks:generic-api-key", "keyed",
        "spring.datasource.password", password())
    add("django-secret-key", "generic", "doc:django startproject", "keyed", "SECRET_KEY",
        "django-insecure-" + pick(string.ascii_lowercase + string.digits + "!@#$%^&*(-_=+)", 50))
    add("rails-secret-key-base", "generic", "doc:rails credentials", "keyed", "SECRET_KEY_BASE", hexs(128))
    add("laravel-app-key", "generic", "doc:laravel", "keyed", "APP_KEY", "base64:" + b64(43) + "=")
    add("flask-secret-key", "generic", "gitleaks:generic-api-key", "keyed", "FLASK_SECRET_KEY", hexs(64))
    add("jwt-secret", "generic", "gitleaks:generic-api-key", "keyed", "JWT_SECRET", b64(48))
    add("nextauth-secret", "generic", "gitleaks:generic-api-key", "keyed", "NEXTAUTH_SECRET", b64(43) + "=")
    add("fernet-key", "generic", "doc:cryptography fernet", "keyed", "ENCRYPTION_KEY", b64url(43) + "=")
    add("webhook-signing-secret", "generic", "gitleaks:generic-api-key", "keyed", "WEBHOOK_SECRET", hexs(40))
    add("session-secret", "generic", "gitleaks:generic-api-key", "keyed", "SESSION_SECRET", alnum(32))
    add("oauth-client-secret", "generic", "gitleaks:generic-api-key", "keyed", "OAUTH_CLIENT_SECRET", b64url(40))
    add("aws-secret-json-name", "aws", "trufflehog:aws", "keyed", "SecretAccessKey", b64(40))
    add("api-key-generic", "generic", "gitleaks:generic-api-key", "keyed", "API_KEY", alnum(32))
    add("access-token-generic", "generic", "gitleaks:generic-api-key", "keyed", "ACCESS_TOKEN", b64url(48))
    add("auth-token-generic", "generic", "gitleaks:generic-api-key", "keyed", "AUTH_TOKEN", hexs(40))
    add("private-key-inline", "generic", "detect-secrets:KeywordDetector", "keyed", "PRIVATE_KEY", hexs(64))

    # --- private keys ----------------------------------------------------------------------------
    for label, id_ in [("RSA PRIVATE KEY", "pem-rsa"), ("PRIVATE KEY", "pem-pkcs8"),
                       ("EC PRIVATE KEY", "pem-ec"), ("OPENSSH PRIVATE KEY", "pem-openssh"),
                       ("ENCRYPTED PRIVATE KEY", "pem-encrypted"), ("DSA PRIVATE KEY", "pem-dsa")]:
        add(id_, "private-key", "gitleaks:private-key", "block", "PRIVATE_KEY", pem(label))
    pgp = ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n" + "\n".join(b64(64) for _ in range(8))
           + "\n=" + b64(4) + "\n-----END PGP PRIVATE KEY BLOCK-----")
    add("pgp-private-block", "private-key", "detect-secrets:PrivateKeyDetector", "block", "GPG_PRIVATE_KEY", pgp)
    putty = ("PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nComment: deploy\nPublic-Lines: 2\n"
             + b64(64) + "\n" + b64(40) + "\nPrivate-Lines: 4\n" + "\n".join(b64(64) for _ in range(3))
             + "\n" + b64(30) + "\nPrivate-MAC: " + hexs(40))
    add("putty-private-key", "private-key", "detect-secrets:PrivateKeyDetector", "block", "PPK", putty,
        secret=putty.split("Private-Lines: 4\n", 1)[1])


def main() -> None:
    build()
    ids = [r["id"] for r in RECORDS]
    assert len(ids) == len(set(ids)), "duplicate ids"
    out = HERE / "secrets.jsonl"
    with out.open("w", encoding="utf-8") as f:
        for r in RECORDS:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(RECORDS)} formats -> {out}")


if __name__ == "__main__":
    main()
