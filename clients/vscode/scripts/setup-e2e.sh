#!/bin/sh
# Install the prerequisites of the VS Code end-to-end test (tests/vscode/):
#   - Debian packages: chromium, ripgrep and the build tools code-server's native modules need
#   - code-server 4.100.3 (VS Code 1.100.3) under clients/vscode/.cache/code-server
#   - the extension's node_modules (npm ci), including playwright-core
# Idempotent: each step is skipped when its result is already there. Needs root for apt-get.
# Usage: clients/vscode/scripts/setup-e2e.sh [CODE_SERVER_DIR]
set -eu
HERE=$(cd "$(dirname "$0")/.." && pwd)             # clients/vscode
CS_DIR=${1:-${ENGRAM_CODE_SERVER_DIR:-$HERE/.cache/code-server}}
INSTALLER=${ENGRAM_INSTALL_CODE_SERVER:-$HERE/scripts/install-code-server.sh}

need_apt=""
for pkg in chromium ripgrep build-essential pkg-config python3 libkrb5-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt="$need_apt $pkg"
done
if [ -n "$need_apt" ]; then
    echo "setup-e2e: installing Debian packages:$need_apt"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends $need_apt
fi

if [ ! -x "$CS_DIR/node_modules/.bin/code-server" ] || [ ! -e "$CS_DIR/.engram-installed" ]; then
    if [ ! -f "$INSTALLER" ]; then
        echo "setup-e2e: code-server installer not found at $INSTALLER (set ENGRAM_INSTALL_CODE_SERVER)" >&2
        exit 1
    fi
    echo "setup-e2e: installing code-server into $CS_DIR (slow: several minutes)"
    # code-server's build writes under HOME/XDG dirs: keep them out of the user's home, but keep the
    # user's npm config and cache (a `nodedir` there lets node-gyp build without downloading headers).
    # (resolved before HOME is replaced; Debian's nodejs ships the headers node-gyp needs, so point
    # node-gyp at them instead of letting it download headers, which fails offline)
    NPM_CACHE="${npm_config_cache:-$HOME/.npm}"
    NPM_RC="${npm_config_userconfig:-$HOME/.npmrc}"
    NODEDIR="${npm_config_nodedir:-}"
    if [ -z "$NODEDIR" ] && [ -f /usr/include/node/node_api.h ]; then NODEDIR=/usr; fi
    TMPH=$(mktemp -d)
    HOME="$TMPH" XDG_CONFIG_HOME="$TMPH/.config" XDG_DATA_HOME="$TMPH/.local/share" \
        XDG_CACHE_HOME="$TMPH/.cache" npm_config_cache="$NPM_CACHE" \
        npm_config_userconfig="$NPM_RC" npm_config_nodedir="$NODEDIR" \
        sh "$INSTALLER" "$CS_DIR"
    rm -rf "$TMPH"
    touch "$CS_DIR/.engram-installed"
fi
# (--version writes a default config under XDG_CONFIG_HOME: point it at a throwaway dir)
TMPH=$(mktemp -d)
XDG_CONFIG_HOME="$TMPH" XDG_DATA_HOME="$TMPH" "$CS_DIR/node_modules/.bin/code-server" --version
rm -rf "$TMPH"

cd "$HERE"
if [ ! -d node_modules/playwright-core ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund
fi
echo "setup-e2e: ready (code-server: $CS_DIR)"
