// End-to-end test of the Engram extension in a real VS Code (code-server 4.100.3 = VS Code 1.100.3),
// driven by playwright-core + Debian chromium. Every request that is not to 127.0.0.1 is aborted.
//
// Usage: node test/e2e/e2e.mjs CONFIG.json
// CONFIG (all paths absolute):
//   codeServerDir   dir given to install-code-server.sh (has node_modules/.bin/code-server)
//   vsix            the packaged extension
//   workspace       folder to open (its .engram/ config and .engram-cache/ index are prepared)
//   file            file to open, relative to workspace
//   line            1-based line of the symbol to hover/explain (the line the code lens sits on)
//   settings        extra user settings (engram.server.path / pythonPath, ...)
//   env             extra environment for code-server (and so for engram-lsp)
//   artifacts       folder for screenshots and result.json
//   mode            "full" (default) or "activation": stop once the server process has started
//   serverMarker    (activation mode) a file the server command creates when it starts
//   expect          { lens: "regex", hover: ["substring", ...], explain: ["substring", ...] }
//   timeoutMs       per wait (default 60000)
// Writes <artifacts>/result.json ({ok, checks: [{name, ok, detail}], observed: {...}}) and exits 0
// only when every check passed.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const timeout = config.timeoutMs ?? 60_000;
const mode = config.mode ?? 'full';
const artifacts = config.artifacts;
mkdirSync(artifacts, { recursive: true });

const checks = [];
const observed = {};
function check(name, ok, detail = '') {
    checks.push({ name, ok: Boolean(ok), detail: String(detail).slice(0, 2000) });
    console.log(`${ok ? 'PASS' : 'FAIL'} ${name}${detail ? `: ${String(detail).slice(0, 300)}` : ''}`);
}

function freePort() {
    return new Promise((resolve, reject) => {
        const srv = createServer();
        srv.unref();
        srv.on('error', reject);
        srv.listen(0, '127.0.0.1', () => {
            const { port } = srv.address();
            srv.close(() => resolve(port));
        });
    });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(fn, what, ms = timeout, every = 250) {
    const end = Date.now() + ms;
    let last;
    while (Date.now() < end) {
        try {
            last = await fn();
            if (last) {
                return last;
            }
        } catch (error) {
            last = error;
        }
        await sleep(every);
    }
    throw new Error(`timed out after ${ms} ms waiting for ${what}${last instanceof Error ? ` (${last.message})` : ''}`);
}

// --------------------------------------------------------------------------------------------------
// Isolated code-server

const tmp = mkdtempSync(join(tmpdir(), 'engram-vscode-e2e-'));
const home = join(tmp, 'home');
const userData = join(tmp, 'user-data');
const extensions = join(tmp, 'extensions');
for (const dir of [home, userData, extensions, join(userData, 'User')]) {
    mkdirSync(dir, { recursive: true });
}
const env = {
    ...process.env,
    HOME: home,
    XDG_CONFIG_HOME: join(home, '.config'),
    XDG_DATA_HOME: join(home, '.local', 'share'),
    XDG_CACHE_HOME: join(home, '.cache'),
    XDG_STATE_HOME: join(home, '.local', 'state'),
    ...(config.env ?? {}),
};
delete env.VSCODE_IPC_HOOK_CLI;
const codeServer = join(config.codeServerDir, 'node_modules', '.bin', 'code-server');

const userSettings = {
    'workbench.startupEditor': 'none',
    'workbench.tips.enabled': false,
    'workbench.enableExperiments': false,
    'workbench.colorTheme': config.theme ?? 'Default Dark Modern',
    'security.workspace.trust.enabled': false,
    'extensions.autoCheckUpdates': false,
    'extensions.autoUpdate': false,
    'extensions.ignoreRecommendations': true,
    'telemetry.telemetryLevel': 'off',
    'update.mode': 'none',
    'editor.codeLens': true,
    'editor.hover.delay': 100,
    'editor.minimap.enabled': false,
    'git.enabled': false,
    'chat.disableAIFeatures': true,
    'chat.commandCenter.enabled': false,
    'window.commandCenter': false,
    'engram.showNotifications': 'always',
    'engram.trace.server': 'messages',
    ...(config.settings ?? {}),
};
writeFileSync(join(userData, 'User', 'settings.json'), JSON.stringify(userSettings, null, 2));

const install = spawnSync(codeServer, ['--user-data-dir', userData, '--extensions-dir', extensions, '--install-extension', config.vsix], {
    env,
    encoding: 'utf8',
    timeout: 120_000,
});
check('vsix installs', install.status === 0 && /successfully installed/i.test(install.stdout + install.stderr), (install.stdout + install.stderr).trim());

const port = await freePort();
const cfgFile = join(tmp, 'code-server.yaml');
writeFileSync(cfgFile, `bind-addr: 127.0.0.1:${port}\nauth: none\ncert: false\n`);
const csLog = [];
const cs = spawn(
    codeServer,
    [
        '--config', cfgFile,
        '--user-data-dir', userData,
        '--extensions-dir', extensions,
        '--disable-telemetry',
        '--disable-update-check',
        '--disable-workspace-trust',
        '--disable-getting-started-override',
        config.workspace,
    ],
    { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
);
cs.stdout.on('data', (d) => csLog.push(String(d)));
cs.stderr.on('data', (d) => csLog.push(String(d)));

let browser;
let page;
let exitCode = 1;

async function shot(name) {
    if (!page) {
        return;
    }
    const file = join(artifacts, `${name}.png`);
    try {
        await page.screenshot({ path: file });
        console.log(`screenshot ${file}`);
    } catch (error) {
        console.log(`screenshot ${name} failed: ${error.message}`);
    }
}

/** The text of a webview whose document contains `needle` (a string, or a predicate on the text).
 * code-server nests webviews in iframes and keeps a replaced frame around for a while, so the
 * newest matching frame wins. */
async function webviewText(needle) {
    const test = typeof needle === 'function' ? needle : (text) => text.includes(needle);
    let found;
    for (const frame of page.frames()) {
        if (frame.isDetached()) {
            continue;
        }
        try {
            const text = await frame.evaluate(() => (document.body ? document.body.innerText : ''));
            if (text && test(text)) {
                found = { frame, text };
            }
        } catch {
            // frame detached or still loading
        }
    }
    return found;
}

/** Click `selector` in the newest webview matching `needle`, retrying while frames are replaced. */
async function clickInWebview(needle, selector) {
    return waitFor(async () => {
        const v = await webviewText(needle);
        if (!v) {
            return undefined;
        }
        const target = v.frame.locator(selector).first();
        if ((await target.count()) === 0) {
            return undefined;
        }
        await target.click({ timeout: 5000 });
        return true;
    }, `${selector} in the webview`);
}

async function runCommand(title) {
    await page.keyboard.press('F1');
    const input = page.locator('.quick-input-widget input');
    await input.waitFor({ state: 'visible', timeout });
    await input.fill(`>${title}`);
    await page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first().waitFor({ timeout });
    await page.keyboard.press('Enter');
}

async function statusBarText() {
    const item = page.locator('#engram\\.engram-vscode\\.engram\\.status, .statusbar-item[id$="engram.status"]');
    if ((await item.count()) === 0) {
        return '';
    }
    return (await item.first().innerText()).trim();
}

try {
    await waitFor(async () => {
        const r = await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => undefined);
        return r?.ok;
    }, 'code-server to listen', 90_000, 500);

    browser = await chromium.launch({
        executablePath: config.chromium ?? '/usr/bin/chromium',
        args: [
            '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
            '--disable-background-networking', '--disable-component-update', '--disable-sync',
            '--disable-dev-shm-usage',
        ],
    });
    const context = await browser.newContext({ viewport: { width: 1500, height: 950 } });
    const blocked = new Set();
    await context.route('**/*', (route) => {
        const url = new URL(route.request().url());
        if (url.protocol === 'data:' || url.protocol === 'blob:' || url.hostname === '127.0.0.1' || url.hostname.endsWith('.127.0.0.1')) {
            return route.continue();
        }
        // vscode-webview:// and vscode-resource URLs are served by the workbench's service worker.
        if (url.protocol.startsWith('vscode-')) {
            return route.continue();
        }
        blocked.add(url.origin);
        return route.abort();
    });
    page = await context.newPage();
    page.setDefaultTimeout(timeout);
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(config.workspace)}`);
    await page.locator('.monaco-workbench').waitFor({ timeout: 90_000 });
    await sleep(1500);

    // Open the file with Quick Open.
    await page.keyboard.press('Control+P');
    const quick = page.locator('.quick-input-widget input');
    await quick.waitFor({ state: 'visible' });
    await quick.fill(config.file);
    await page.locator('.quick-input-list .monaco-list-row').first().waitFor();
    await page.keyboard.press('Enter');
    await page.locator('.monaco-editor .view-lines').first().waitFor();
    await page.locator('.tab.active', { hasText: config.file.split('/').pop() }).waitFor();
    check('file opens', true, config.file);

    if (mode === 'activation') {
        const marker = await waitFor(() => existsSync(config.serverMarker) && readFileSync(config.serverMarker, 'utf8'), 'the server process to start');
        observed.serverMarker = marker;
        check('extension activated and started the server process', true, marker.trim());
        const sb = await waitFor(statusBarText, 'the Engram status-bar item');
        observed.statusBar = sb;
        check('status-bar item shows Engram', /Engram/.test(sb), sb);
        await sleep(1500);
        await shot('activation');
        await runCommand('Engram: Show Log');
        await sleep(1500);
        await shot('activation-log');
    } else {
        // Status bar: server running (with a session count once indexing is done).
        const sb = await waitFor(async () => {
            const t = await statusBarText();
            return /session/.test(t) ? t : undefined;
        }, 'the status bar to show a session count');
        observed.statusBar = sb;
        check('status bar shows the session count', /Engram: \d+ sessions?/.test(sb), sb);

        // Code lens.
        const lensRe = new RegExp(config.expect?.lens ?? '^\\d+ sessions?$');
        const lenses = await waitFor(async () => {
            const texts = await page.locator('.codelens-decoration a').allInnerTexts();
            return texts.some((t) => lensRe.test(t.trim())) ? texts.map((t) => t.trim()) : undefined;
        }, 'the Engram code lens', timeout, 500);
        observed.lenses = lenses;
        check('code lens text', lenses.some((t) => lensRe.test(t)), JSON.stringify(lenses));
        await shot('codelens');

        // Hover (Ctrl+K Ctrl+I at the symbol's line).
        await page.keyboard.press('Control+G');
        await quick.waitFor({ state: 'visible' });
        await quick.fill(`:${config.line}:5`);
        await page.keyboard.press('Enter');
        await sleep(300);
        let hoverText = '';
        for (let attempt = 0; attempt < 5 && !hoverText.includes(config.expect?.hover?.[0] ?? 'session'); attempt++) {
            await page.keyboard.press('Control+K');
            await page.keyboard.press('Control+I');
            hoverText = await waitFor(async () => {
                const contents = await page.locator('.monaco-hover-content:visible').allInnerTexts();
                const joined = contents.join('\n').trim();
                return joined || undefined;
            }, 'the hover', 10_000).catch(() => '');
            if (!hoverText.includes(config.expect?.hover?.[0] ?? 'session')) {
                await page.keyboard.press('Escape');
                await sleep(1000);
            }
        }
        observed.hover = hoverText;
        for (const want of config.expect?.hover ?? []) {
            check(`hover contains ${JSON.stringify(want)}`, hoverText.includes(want), hoverText);
        }
        await shot('hover');
        await page.keyboard.press('Escape');

        // Explain view, opened by clicking the code lens (the server's engram.explain + middleware).
        const want = config.expect?.explain ?? [];
        await page.locator('.codelens-decoration a', { hasText: lensRe }).first().click();
        const lensView = await waitFor(() => webviewText(want[0] ?? 'session'), 'the explain view (code lens click)');
        observed.explainFromLens = lensView.text;
        for (const w of want) {
            check(`explain view (code lens) contains ${JSON.stringify(w)}`, lensView.text.includes(w), lensView.text.slice(0, 500));
        }
        await sleep(800);
        await shot('explain-codelens');

        // Expand window: re-requests with a larger window.
        if (/Expand window/.test(lensView.text)) {
            const before = Number(lensView.text.match(/window (\d+)\s+before/)?.[1]);
            await clickInWebview((text) => /requested lines/.test(text), 'button[data-action="expand"]');
            const expanded = await waitFor(
                () => webviewText((text) => new RegExp(`window ${before + 5}\\s+before`).test(text) && text.includes(want[0] ?? 'session')),
                'the expanded explain view',
            );
            observed.explainExpanded = expanded.text;
            check('Expand window re-requests with a larger window', true, expanded.text.match(/window \d+\s+before, \d+ after/)?.[0]);
            await shot('explain-expanded');
        }

        // Explain Selection from the command palette (cursor in the symbol, no selection).
        await page.locator('.monaco-editor .view-lines').first().click();
        await page.keyboard.press('Control+G');
        await quick.waitFor({ state: 'visible' });
        await quick.fill(`:${config.line}:3`);
        await page.keyboard.press('Enter');
        await runCommand('Engram: Explain Selection');
        // A fresh render: the window is back to the settings' size (the lens view was expanded).
        const cmdView = await waitFor(
            () => webviewText((text) => /requested lines/.test(text) && /window 3\s+before/.test(text)),
            'the explain view (command)',
        );
        observed.explainFromCommand = cmdView.text;
        for (const w of want) {
            check(`explain view (command) contains ${JSON.stringify(w)}`, cmdView.text.includes(w), cmdView.text.slice(0, 500));
        }
        await sleep(800);
        await shot('explain-command');

        // Open tape from the explain view.
        if (/Open tape/.test(cmdView.text)) {
            await clickInWebview((text) => /requested lines/.test(text), 'button[data-action="openTape"]');
            const tape = await waitFor(() => webviewText('around event #'), 'the tape view');
            observed.tape = tape.text;
            check('Open tape shows the tape around the anchor', /Tape \S+ · around event #\d+/.test(tape.text), tape.text.slice(0, 300));
            await sleep(800);
            await shot('tape');
        }
    }
    if (mode !== 'activation') {
        // Reindex (server command engram.reindex via the client-side engram.reindexIndex), then Show Status.
        await runCommand('Engram: Reindex');
        const progress = await waitFor(async () => {
            const t = await statusBarText();
            return /indexing|session/.test(t) ? t : undefined;
        }, 'the status bar during/after reindex', timeout, 100);
        observed.reindexStatusBar = progress;
        const afterReindex = await waitFor(async () => {
            const t = await statusBarText();
            return /Engram: \d+ sessions?/.test(t) ? t : undefined;
        }, 'the session count after reindex');
        check('Reindex ends with the session count in the status bar', true, `${progress} → ${afterReindex}`);
        await runCommand('Engram: Show Status');
        // Rendered by VS Code's Markdown preview (a webview).
        const statusText = (await waitFor(() => webviewText('Engram status'), 'the status document')).text;
        observed.status = statusText;
        check('Show Status opens the status document', /sessions? indexed/.test(statusText), statusText.slice(0, 300));
        await shot('status');

        // Honour the user: switching hovers and lenses off takes effect without a restart. The settings
        // are edited through VS Code (settings.json editor), as a user would; a write behind its back is
        // not reliably noticed by code-server's file watcher.
        await runCommand('Preferences: Open User Settings (JSON)');
        await page.locator('.tab.active', { hasText: 'settings.json' }).waitFor();
        await page.locator('.editor-group-container.active .monaco-editor textarea').first().focus();
        // Pasted (typing would trigger auto-closing brackets and auto-indent).
        const newSettings = JSON.stringify({ ...userSettings, 'engram.codeLens.enabled': false, 'engram.hover.enabled': false }, null, 4);
        await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: `http://127.0.0.1:${port}` });
        await page.evaluate((text) => navigator.clipboard.writeText(text), newSettings);
        await page.keyboard.press('Control+A');
        await page.keyboard.press('Control+V');
        await page.keyboard.press('Control+S');
        await sleep(500);
        await page.locator('.tab', { hasText: config.file.split('/').pop() }).first().click();
        await waitFor(async () => (await page.locator('.codelens-decoration a').count()) === 0, 'the code lens to disappear').catch(async (error) => {
            await runCommand('Engram: Show Log');
            await sleep(1000);
            observed.log = (await page.locator('.panel .view-lines').first().innerText().catch(() => '')).slice(-4000);
            throw error;
        });
        check('engram.codeLens.enabled = false removes the lens', true);
        await page.keyboard.press('Control+G');
        await quick.waitFor({ state: 'visible' });
        await quick.fill(`:${config.line}:5`);
        await page.keyboard.press('Enter');
        await page.keyboard.press('Control+K');
        await page.keyboard.press('Control+I');
        await sleep(2500);
        const hoverOff = (await page.locator('.monaco-hover-content:visible').allInnerTexts()).join('\n');
        observed.hoverWhenDisabled = hoverOff;
        check('engram.hover.enabled = false: no Engram hover', !/Engram/.test(hoverOff), hoverOff);
        await shot('disabled');
        await page.keyboard.press('Escape');
    }
    observed.blockedOrigins = [...blocked];
    exitCode = checks.every((c) => c.ok) ? 0 : 1;
} catch (error) {
    check('e2e run', false, error.stack ?? String(error));
    await shot('failure');
} finally {
    observed.codeServerLog = csLog.join('').slice(-4000);
    writeFileSync(join(artifacts, 'result.json'), JSON.stringify({ ok: exitCode === 0, checks, observed }, null, 2));
    try {
        await browser?.close();
    } catch {
        // already gone
    }
    try {
        process.kill(-cs.pid, 'SIGTERM'); // the whole process group: code-server, its extension host, engram-lsp
    } catch {
        // already gone
    }
    await sleep(1000);
    try {
        process.kill(-cs.pid, 'SIGKILL');
    } catch {
        // gone
    }
    if (!config.keepTemp) {
        rmSync(tmp, { recursive: true, force: true });
    }
}
process.exit(exitCode);
