#!/usr/bin/env bash
# make demo: ingest the bundled sample harness logs into an embedded index and explain sample code.
# Everything lives under .demo/ (ENGRAM_HOME and HOME included), so your real ~/.claude, ~/.codex
# and ~/.engram are never read or written.
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$(pwd)
ENGRAM="$TOP/.venv/bin/engram"
DEMO="$TOP/.demo"
rm -rf "$DEMO"
mkdir -p "$DEMO/home"
cp -r examples/sample-repo "$DEMO/repo"
export ENGRAM_HOME="$DEMO/engram-home" HOME="$DEMO/home" ENGRAM_NO_PROGRESS=1
cd "$DEMO/repo"
git init -q .
"$ENGRAM" init --pretty
{
  # the sample logs keep their upstream names (see SOURCES.md), so list them instead of relying on
  # each harness's on-disk naming
  echo "harnesses:"
  for h in claude_code codex gemini_cli cursor openclaw aider; do
    echo "  $h:"
    echo "    paths:"
    for f in "$TOP/tests/data/harness/$h"/*; do
      case "$f" in *SOURCES.md|*.aider.input.history) continue ;; esac
      echo "      - \"$f\""
    done
  done
  echo "  opencode:"
  echo "    paths: [\"$TOP/tests/data/harness/opencode/sqlite/gitai__opencode.db\", \"$TOP/tests/data/harness/opencode/storage_v2\"]"
} >> .engram/config.yml

echo; echo "\$ engram ingest --seal --pretty"
"$ENGRAM" ingest --seal --pretty
echo; echo "\$ engram tapes --pretty"
"$ENGRAM" tapes --pretty
echo; echo "\$ engram explain hello.py:3-5 --pretty"
"$ENGRAM" explain hello.py:3-5 --pretty --before 2 --after 2
echo; echo "\$ engram explain hello.py:3-5 --brief   (JSON, what agents and the LSP get)"
"$ENGRAM" explain hello.py:3-5 --brief
