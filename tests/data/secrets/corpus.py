"""The redaction benchmark: recall on synthetic secrets placed where secrets turn up in agent logs,
and false positives on three corpora of things that are not secrets.

Used by ``tests/unit/test_redact_corpus.py`` (which asserts the targets) and by
``bench/bench_redact.py`` (which prints the figures, for this redactor or another one).

Recall: every format of ``secrets.jsonl`` (see ``make_secrets.py``) is put in every place of
``PLACES`` that suits its kind, as the events an adapter would produce (a user or assistant
message, a tool call's arguments, its output, a Read with line-number gutters, an Edit's old and
new strings, a file path, the session label made from the first message, ...). The events go
through ``finish_session`` like any adapter's; a case is *caught* when no 8-character piece of the
secret is left in any string of any event.

False positives, three corpora that must come out untouched:

* ``nonsecret.txt``: realistic configuration lines that are not secrets (one per line);
* the real harness logs under ``tests/data/harness/``, parsed by their adapters;
* real code: a fixed, deterministic sample of the Python standard library and of the packages
  the project depends on (``code_sample()``).
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
HARNESS = ROOT / "tests" / "data" / "harness"
FRAGMENT = 8  # a leak is any piece of the secret this long left anywhere in the events


def load_secrets() -> list[dict]:
    return [json.loads(ln) for ln in (HERE / "secrets.jsonl").read_text(encoding="utf-8").splitlines() if ln]


def load_nonsecrets() -> list[str]:
    out = []
    for ln in (HERE / "nonsecret.txt").read_text(encoding="utf-8").splitlines():
        if ln.strip() and not ln.startswith("##"):
            out.append(ln.replace("\\n", "\n"))
    return out


# --------------------------------------------------------------------------------------------
# Places


def _camel(name: str) -> str:
    parts = [p for p in re.split(r"[_.]", name) if p]
    if len(parts) == 1:
        return parts[0][:1].lower() + parts[0][1:]
    return parts[0].lower() + "".join(p[:1].upper() + p[1:].lower() for p in parts[1:])


def _snake(name: str) -> str:
    if "_" in name or "." in name or name.isupper():
        return name.lower()
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def _header(value: str) -> tuple[str, str]:
    name, _, v = value.partition(": ")
    return name, v


def snippet(rec: dict) -> str:
    """How the secret is mentioned in prose: the value itself, or ``NAME=value`` when only its
    name makes it recognisable."""
    return f"{rec['name']}={rec['value']}" if rec["kind"] == "keyed" else rec["value"]


def assign(rec: dict) -> str:
    """A ``.env`` line (or the kind's own line for headers, commands, blocks)."""
    k, v = rec["kind"], rec["value"]
    if k in ("token", "keyed", "url"):
        return f"{rec['name']}={v}"
    if k == "connstr":
        return f'{rec["name"]}="{v}"'
    return v


def _gutter(text: str, first: int = 1) -> str:
    return "".join(f"{i:>6}→{ln}\n" for i, ln in enumerate(text.split("\n"), first))


@dataclass(frozen=True)
class Place:
    id: str
    kinds: tuple[str, ...]
    build: object  # rec -> (first user message, [events after it])


ALL = ("token", "keyed", "url", "connstr", "block", "cmd", "header")
ASSIGNABLE = ("token", "keyed", "url", "connstr")
FIRST = "Please help me finish the deploy configuration for the billing service."


def _msg(k, text):
    return {"t": "2025-01-01T00:00:01.000Z", "k": k, "text": text}


def _result(stdout, tool="Bash"):
    return {"t": "2025-01-01T00:00:02.000Z", "k": "tool.result", "tool": tool, "call_id": "c1",
            "stdout": stdout, "stderr": None, "exit": 0}


def _call(args, tool="Bash"):
    return {"t": "2025-01-01T00:00:02.000Z", "k": "tool.call", "tool": tool, "call_id": "c1", "args": args}


def _edit(before, after, file="/repo/.env"):
    from engram.adapters.base import ev_edit

    return ev_edit("2025-01-01T00:00:03.000Z", file, 1, before, 1, after, cwd="/repo")


def _read(text, file="/repo/config/settings.env"):
    from engram.adapters.base import ev_read

    return ev_read("2025-01-01T00:00:03.000Z", file, 1, text, cwd="/repo")


def _config_file(rec):
    return f"# billing service\n{assign(rec)}\nLOG_LEVEL=info\n"


def _json_value(rec, camel=False):
    k, v = rec["kind"], rec["value"]
    if k == "header":
        n, hv = _header(v)
        return {"url": "https://api.acme.dev/v1/items", "headers": {n: hv}}
    if k == "cmd":
        return {"command": v, "timeout": 120}
    if k == "block":
        return {"type": "service_account", "client_email": "ci@acme.iam.gserviceaccount.com", "private_key": v + "\n"}
    return {(_camel(rec["name"]) if camel else rec["name"]): v, "region": "us-east-1"}


def _yaml(rec, quoted=False):
    k, v = rec["kind"], rec["value"]
    if k == "header":
        n, hv = _header(v)
        return f"request:\n  headers:\n    {n}: {hv}\n"
    if k == "cmd":
        return f"steps:\n  - name: publish\n    run: {v}\n"
    if k == "block":
        return "tls:\n  private_key: |\n" + "".join(f"    {ln}\n" for ln in v.split("\n"))
    v = f'"{v}"' if quoted else v
    return f"billing:\n  {_snake(rec['name'])}: {v}\n  region: eu-west-1\n"


def _shell(rec):
    k, v, n = rec["kind"], rec["value"], rec["name"]
    if k == "token":
        return f"curl -sS -H 'Authorization: Bearer {v}' https://api.acme.dev/v1/me"
    if k == "keyed":
        return f"docker run --rm -e {n}={v} acme/billing:1.4.2"
    if k == "url":
        return f"curl -fsS -X POST -H 'Content-Type: application/json' -d '{{\"text\":\"deployed\"}}' '{v}'"
    if k == "connstr":
        return f'az storage container list --connection-string "{v}" -o table'
    if k == "header":
        return f"curl -fsS -H '{v}' https://api.acme.dev/v1/items"
    if k == "block":
        return f"cat > ~/.ssh/id_deploy <<'EOF'\n{v}\nEOF\nchmod 600 ~/.ssh/id_deploy"
    return v


def _label_cut(rec):
    lead = "Could you look at why the nightly job fails? It started after I set "
    return f"{lead}{snippet(rec)} on the runner and pushed the new config yesterday."


PLACES: list[Place] = [
    Place("user_text", ALL, lambda r: (FIRST, [
        _msg("msg.in", f"Here it is: {snippet(r)} — please wire it into the deploy.")])),
    Place("assistant_text", ALL, lambda r: (FIRST, [_msg("msg.out", f"I added `{assign(r)}` to your environment, "
                                                                      "so the client picks it up on start.")])),
    Place("tool_output", ALL, lambda r: (FIRST, [_call({"command": "printenv | sort"}),
                                                 _result(f"HOME=/home/dev\n{assign(r)}\nPATH=/usr/local/bin:/usr/bin\n")])),
    Place("read_gutter", ALL, lambda r: (FIRST, [_call({"file_path": "/repo/config/settings.env"}, "Read"),
                                                 _result(_gutter(_config_file(r).rstrip("\n"), 11), "Read"),
                                                 _read(_config_file(r))])),
    Place("edit_old", ALL, lambda r: (FIRST, [_edit(_config_file(r), "# billing service\nLOG_LEVEL=info\n")])),
    Place("edit_new", ALL, lambda r: (FIRST, [_edit("# billing service\n", _config_file(r))])),
    Place("code_kwarg", ("token", "keyed"), lambda r: (FIRST, [
        _edit("", f'client = BillingClient(api_key="{r["value"]}", timeout=30)\n', "/repo/app/client.py"),
        _edit("", f"const {_camel(r['name'])} = '{r['value']}';\n", "/repo/web/config.ts")])),
    Place("brackets", ("token", "keyed"), lambda r: (FIRST, [
        _edit("", f"settings['{r['name']}'] = '{r['value']}'\n", "/repo/app/settings.py")])),
    Place("path", ("token",), lambda r: (FIRST, [
        _call({"file_path": f"/home/dev/.cache/acme/{r['value']}.json"}, "Read"),
                                                 _read("{}\n", f"/home/dev/.cache/acme/{r['value']}.json")])),
    Place("label_start", ALL, lambda r: (f"{snippet(r)} is what the billing service should use, set it up", [])),
    Place("label_cut", ALL, lambda r: (_label_cut(r), [])),
    Place("json", ALL, lambda r: (FIRST, [_result(json.dumps(_json_value(r), indent=2), "Read")])),
    Place("json_camel", ASSIGNABLE, lambda r: (FIRST, [_result(json.dumps(_json_value(r, camel=True)), "Read")])),
    Place("json_escaped", ALL, lambda r: (FIRST, [
        _msg("msg.out", "The payload is " + json.dumps(json.dumps(_json_value(r))))])),
    Place("yaml", ALL, lambda r: (FIRST, [_result(_yaml(r), "Read")])),
    Place("yaml_quoted", ASSIGNABLE, lambda r: (FIRST, [_result(_yaml(r, quoted=True), "Read")])),
    Place("toml", ASSIGNABLE, lambda r: (FIRST, [
        _result(f'[billing]\n{_snake(r["name"])} = "{r["value"]}"\n', "Read")])),
    Place("env_export", ASSIGNABLE, lambda r: (FIRST, [
        _call({"command": f"export {r['name']}='{r['value']}' && npm run deploy"})])),
    Place("shell", ALL, lambda r: (FIRST, [_call({"command": _shell(r), "description": "check the credentials"})])),
    Place("url_query", ("token", "keyed"), lambda r: (FIRST, [
        _call({"url": f"https://api.acme.dev/v2/items?page=2&api_key={r['value']}&format=json"}, "WebFetch")])),
    Place("header_bearer", ("token",), lambda r: (FIRST, [_result(
        f"> GET /v1/me HTTP/2\n> Host: api.acme.dev\n> Authorization: Bearer {r['value']}\n> Accept: */*\n")])),
    Place("header_x_api_key", ("token", "keyed"), lambda r: (FIRST, [_call({"command":
        f'curl -s https://api.acme.dev/v1/usage -H "X-API-Key: {r["value"]}"'})])),
]


# --------------------------------------------------------------------------------------------
# Running a case


class _Meta:  # stands in for an Adapter in ev_meta
    name, tier, version = "corpus", "agent", "1"


def session_events(first: str, rest: list[dict], label_of) -> list[dict]:
    from engram.adapters.base import ev_meta

    meta = ev_meta("2025-01-01T00:00:00.000Z", harness="corpus", session="s1", adapter=_Meta(),
                   source_path="corpus.jsonl", label=label_of(first))  # as adapters do
    return [meta, _msg("msg.in", first), *rest]


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def fragments(secret: str) -> list[str]:
    out = []
    for line in re.split(r"\n", secret):
        line = line.strip()
        if len(line) < FRAGMENT:
            continue
        out.extend(line[i:i + FRAGMENT] for i in range(0, len(line) - FRAGMENT + 1, 2))
    return out


def _label_cut_first(text: str) -> str:
    """How labels were made before they were redacted first (to measure the old behaviour)."""
    from engram.adapters.base import LABEL_MAX

    one = " ".join(text.split())
    return one if len(one) <= LABEL_MAX else one[: LABEL_MAX - 1].rstrip() + "…"


@contextlib.contextmanager
def using(redact_module, old_labels: bool = False):
    """Run ``finish_session`` and ``label_of`` with ``redact_module`` in place of the project's;
    ``old_labels``: labels cut before redaction, as they were made before (for a before/after)."""
    from engram.adapters import base

    saved = base.redact, base.label_of, base._relabel_cut
    base.redact = redact_module
    if old_labels:
        base.label_of, base._relabel_cut = _label_cut_first, lambda events: None
    try:
        yield
    finally:
        base.redact, base.label_of, base._relabel_cut = saved


@dataclass
class Case:
    rec: dict
    place: str
    leaked: str | None  # where a fragment was left, None when caught


def run_cases(redact_module=None, old_labels: bool = False) -> list[Case]:
    """Every format in every place that suits it; the leak (if any) of each."""
    from engram.adapters import base
    from engram.adapters import redact as default

    mod = redact_module or default
    out = []
    with using(mod, old_labels):
        for rec in load_secrets():
            frags = fragments(rec.get("secret", rec["value"]))
            for place in PLACES:
                if rec["kind"] not in place.kinds:
                    continue
                first, rest = place.build(rec)
                evs = session_events(first, [dict(e) for e in rest], base.label_of)
                base.finish_session(evs)
                leaked = None
                for ev in evs:
                    for s in strings(ev):
                        if any(f in s for f in frags):
                            leaked = s
                            break
                    if leaked:
                        break
                out.append(Case(rec, place.id, leaked))
    return out


def recall_by(cases: list[Case], key) -> dict[str, tuple[int, int]]:
    agg: dict[str, list[int]] = {}
    for c in cases:
        a = agg.setdefault(key(c), [0, 0])
        a[0] += c.leaked is None
        a[1] += 1
    return {k: (v[0], v[1]) for k, v in sorted(agg.items())}


# --------------------------------------------------------------------------------------------
# False-positive corpora


def fixture_sources() -> list[tuple[str, Path]]:
    """(harness, source) for every real log under tests/data/harness/."""
    from engram import adapters

    out = []
    for name in sorted(adapters.REGISTRY):
        root = HARNESS / name
        if not root.is_dir():
            continue
        if name == "opencode":
            srcs = sorted(p for p in [*root.glob("sqlite/*.db"), root / "storage_v2"] if p.exists())
        else:
            srcs = sorted(p for p in root.iterdir()
                          if p.is_file() and p.name != "SOURCES.md" and not p.name.endswith(".input.history"))
        out.extend((name, s) for s in srcs)
    return out


class _NoRedaction:
    @staticmethod
    def redact_event(ev):
        return 0

    @staticmethod
    def redact_text(text):
        return text, 0


def fixture_events() -> list[tuple[str, dict]]:
    """(source, event) of every event an adapter makes of the real logs, before redaction."""
    from engram import adapters

    out = []
    with using(_NoRedaction):
        for name, src in fixture_sources():
            for sess in adapters.get(name).parse_source(src).sessions:
                out.extend((f"{name}/{src.name}", ev) for ev in sess.events)
    return out


def fixture_texts() -> list[tuple[str, str]]:
    """(source, text) of every string of those events that redaction looks at."""
    from engram.adapters.redact import _SKIP_KEYS

    return [(src, s) for src, ev in fixture_events() for k, v in ev.items() if k not in _SKIP_KEYS
            for s in strings(v)]


# Python standard library modules full of passwords, tokens, keys and auth (always included),
# then every 7th other module in sorted order; packages the project depends on, every 5th file.
STDLIB_ALWAYS = (
    "base64.py", "ftplib.py", "getpass.py", "hashlib.py", "hmac.py", "imaplib.py", "netrc.py",
    "nntplib.py", "poplib.py", "secrets.py", "smtplib.py", "ssl.py", "uuid.py", "tokenize.py",
    "token.py", "http/client.py", "http/cookiejar.py", "http/cookies.py", "urllib/request.py",
    "urllib/parse.py", "logging/handlers.py", "xmlrpc/client.py", "email/_header_value_parser.py",
    "email/utils.py", "json/decoder.py", "configparser.py", "shlex.py", "crypt.py",
)
STDLIB_SKIP_DIRS = ("test", "tests", "idlelib", "lib2to3", "site-packages", "turtledemo", "ensurepip",
                    "__pycache__", "config-3")
PACKAGES = ("yaml", "pygls", "lsprotocol", "_pytest", "hypothesis", "watchdog", "zstandard", "apsw",
            "huggingface_hub", "httpx2", "jinja2", "click")


def code_sample() -> list[tuple[str, Path]]:
    """(name, path) of the real-code sample: deterministic for a given Python and venv."""
    out = []
    std = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p.relative_to(std).as_posix() for p in std.rglob("*.py")
                   if not any(part in STDLIB_SKIP_DIRS or part.startswith("config-")
                              for part in p.relative_to(std).parts[:-1]))
    for i, rel in enumerate(files):
        if rel in STDLIB_ALWAYS or i % 7 == 0:
            out.append((f"stdlib/{rel}", std / rel))
    site = Path(sysconfig.get_paths()["purelib"])
    if sys.prefix != sys.base_prefix or site.exists():
        for pkg in PACKAGES:
            root = site / pkg
            if not root.is_dir():
                continue
            pf = sorted(p.relative_to(site).as_posix() for p in root.rglob("*.py")
                        if "tests" not in p.relative_to(root).parts and "test" not in p.relative_to(root).parts)
            out.extend((f"site-packages/{rel}", site / rel) for j, rel in enumerate(pf) if j % 5 == 0)
    return out
