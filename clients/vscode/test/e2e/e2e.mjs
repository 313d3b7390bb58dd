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
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
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

// Tests wait on conditions (`waitFor`, playwright's `locator.waitFor`), never for a fixed time; `sleep`
// is only the polling interval of `waitFor` and `firstWithin`.
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Poll `fn` every `every` ms until it returns something truthy, and return that; an exception
 * counts as "not yet". Throws after `ms`, saying what it waited for. */
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

/** Watch `fn` for `ms`: its first truthy value as soon as there is one, or undefined once the whole
 * window has passed without (an absence check where nothing signals that the thing will not come:
 * see its use). */
async function firstWithin(fn, ms, every = 100) {
    const end = Date.now() + ms;
    while (Date.now() < end) {
        const seen = await fn();
        if (seen) {
            return seen;
        }
        await sleep(every);
    }
    return undefined;
}

/** The Engram output channel as VS Code writes it to disk (a LogOutputChannel: a file under the
 * user-data logs; it also gets the client's protocol trace, engram.trace.server = messages). */
function engramLog() {
    const logs = join(userData, 'logs');
    if (!existsSync(logs)) {
        return '';
    }
    const file = readdirSync(logs, { recursive: true })
        .filter((f) => String(f).endsWith(join('engram.engram-vscode', 'Engram.log')))
        .sort()
        .pop();
    return file ? readFileSync(join(logs, file), 'utf8') : '';
}

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

/** Press `key` (Control+P, Control+G, F1) and wait for the quick input; pressed again only if it
 * has not opened 3 s later (a key pressed while the workbench is still starting up can be lost). */
async function openQuickInput(key) {
    const input = page.locator('.quick-input-widget input');
    await waitFor(async () => {
        if (!(await input.isVisible())) {
            await page.keyboard.press(key);
        }
        await input.waitFor({ state: 'visible', timeout: 3000 });
        return true;
    }, `the quick input (${key})`);
    return input;
}

/** Put the cursor at `line`:`col` of the active editor (Go to Line) and wait until it is there
 * (the quick input closed, the status bar's cursor position says so). */
async function goToLine(line, col) {
    const input = await openQuickInput('Control+G');
    await input.fill(`:${line}:${col}`);
    await page.keyboard.press('Enter');
    await input.waitFor({ state: 'hidden' });
    const position = page.locator('[id="status.editor.selection"]');
    await waitFor(async () => new RegExp(`Ln ${line}, Col ${col}\\b`).test(await position.innerText({ timeout: 2000 })), `the cursor at ${line}:${col}`, timeout, 100);
}

/** The text of the output panel's editor (Engram: Show Log), once it shows any. */
async function panelText() {
    return waitFor(async () => (await page.locator('.panel .view-lines').first().innerText({ timeout: 2000 })).trim(), 'the output panel to show the log', 10_000);
}

/** The webview whose text matches `needle` has finished loading (its document and fonts): what a
 * screenshot of it should show. */
async function webviewSettled(needle) {
    await waitFor(async () => {
        const v = await webviewText(needle);
        return v && v.frame.evaluate(() => document.readyState === 'complete' && document.fonts.status === 'loaded');
    }, 'the webview to finish loading', 10_000, 100);
}

/** Run a command from the palette. The palette can close between opening and typing (focus moves
 * when the workbench finishes something in the background, e.g. a reindex's notification), so
 * opening, typing and finding the row are retried together; Enter is pressed once, when the row is
 * there. */
async function runCommand(title) {
    await waitFor(async () => {
        const input = await openQuickInput('F1');
        await input.fill(`>${title}`, { timeout: 5000 });
        await page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first().waitFor({ timeout: 10_000 });
        return input.isVisible();
    }, `the command palette row "${title}"`);
    await page.keyboard.press('Enter');
}

const statusItem = () => page.locator('#engram\\.engram-vscode\\.engram\\.status, .statusbar-item[id$="engram.status"]');
/** The hovers on screen (their contents). */
const hoverShown = () => page.locator('.monaco-hover-content:visible');

async function statusBarText() {
    const item = statusItem();
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

    // Open the file with Quick Open (openQuickInput presses again if the workbench was not ready).
    const quick = await openQuickInput('Control+P');
    await quick.fill(config.file);
    await page.locator('.quick-input-list .monaco-list-row', { hasText: config.file.split('/').pop() }).first().waitFor();
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
        await statusItem().first().waitFor({ state: 'visible' });
        await shot('activation');
        await runCommand('Engram: Show Log');
        observed.log = (await panelText()).slice(-4000);
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
        await goToLine(config.line, 5);
        const hoverWant = config.expect?.hover?.[0] ?? 'session';
        let hoverText = '';
        for (let attempt = 0; attempt < 3 && !hoverText.includes(hoverWant); attempt++) {
            const asked = Date.now();
            await page.keyboard.press('Control+K');
            await page.keyboard.press('Control+I');
            observed.hoverMs = undefined;
            let seen = '';
            hoverText = await waitFor(async () => {
                seen = (await hoverShown().allInnerTexts()).join('\n').trim();
                observed.hoverMs = Date.now() - asked; // how long the enabled hover takes to show
                return seen.includes(hoverWant) ? seen : undefined;
            }, 'the Engram hover', 10_000).catch(() => seen);
            if (!hoverText.includes(hoverWant)) {
                // another try, once the hover that came without it has closed
                await page.keyboard.press('Escape');
                await waitFor(async () => (await hoverShown().count()) === 0, 'the hover to close', 10_000);
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
        await webviewSettled(want[0] ?? 'session');
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
        await goToLine(config.line, 3);
        await runCommand('Engram: Explain Selection');
        // A fresh render: the window is back to the settings' size (the lens view was expanded).
        const freshRender = (text) => /requested lines/.test(text) && /window 3\s+before/.test(text);
        const cmdView = await waitFor(() => webviewText(freshRender), 'the explain view (command)');
        observed.explainFromCommand = cmdView.text;
        for (const w of want) {
            check(`explain view (command) contains ${JSON.stringify(w)}`, cmdView.text.includes(w), cmdView.text.slice(0, 500));
        }
        await webviewSettled(freshRender);
        await shot('explain-command');

        // Open tape from the explain view.
        if (/Open tape/.test(cmdView.text)) {
            await clickInWebview((text) => /requested lines/.test(text), 'button[data-action="openTape"]');
            const tape = await waitFor(() => webviewText('around event #'), 'the tape view');
            observed.tape = tape.text;
            check('Open tape shows the tape around the anchor', /Tape \S+ · around event #\d+/.test(tape.text), tape.text.slice(0, 300));
            // opening a session counts as using the answer: the client sent engram/used (protocol trace)
            const used = await waitFor(() => /Sending request 'engram\/used/.test(engramLog()), 'engram/used after Open tape').catch(() => false);
            check('Open tape sends engram/used', used);
            await webviewSettled('around event #');
            await shot('tape');
        }
    }
    if (mode !== 'activation') {
        // Line annotation: "Engram: Toggle Line Annotations" marks every line a session wrote (one
        // engram/annotate request per file): a coloured bar per run, the session's request after its
        // first line. Toggled off again, the marks go.
        await page.locator('.tab', { hasText: config.file.split('/').pop() }).first().click();
        await page.locator('.monaco-editor .view-lines').first().click();
        const annotatedBefore = (engramLog().match(/Annotated /g) ?? []).length;
        await runCommand('Engram: Toggle Line Annotations');
        const annotatedLine = await waitFor(() => {
            const lines = engramLog().match(/Annotated [^\n]*/g) ?? [];
            return lines.length > annotatedBefore ? lines[lines.length - 1] : undefined;
        }, 'the extension to log the annotation');
        observed.annotated = annotatedLine;
        check('annotation answered for the file', /Annotated hello\.py: 1 session, \d+ of \d+ lines/.test(annotatedLine), annotatedLine);
        const barred = async () => page.locator('.monaco-editor .view-overlays div').evaluateAll((els) =>
            els.filter((el) => getComputedStyle(el).borderLeftWidth === '3px').map((el) => getComputedStyle(el).borderLeftColor));
        const bars = await waitFor(async () => {
            const found = await barred();
            return found.length ? found : undefined;
        }, 'annotated lines (coloured bars) in the editor');
        observed.annotationBars = bars;
        check('annotated lines carry one colour per session', bars.length >= 3 && new Set(bars).size === 1, JSON.stringify(bars));
        const labels = await page.locator('.monaco-editor .view-lines span').evaluateAll((els) =>
            els.map((el) => getComputedStyle(el, '::after').content).filter((c) => c && c.includes('◆')));
        observed.annotationLabels = labels;
        check("the run's label names the session's request", labels.some((c) => c.includes(config.expect?.explain?.[0] ?? 'session')), JSON.stringify(labels));
        await shot('annotations');
        await runCommand('Engram: Toggle Line Annotations');
        await waitFor(async () => (await barred()).length === 0, 'the annotation to go when toggled off');
        check('toggling again removes the annotation', true);

        // Feedback: the explain view's buttons on each session (engram/feedback about the span).
        await page.locator('.monaco-editor .view-lines').first().click();
        await goToLine(config.line, 3);
        await runCommand('Engram: Explain Selection');
        await waitFor(() => webviewText((text) => /requested lines/.test(text) && /Helpful/.test(text)), 'the explain view with feedback buttons');
        const fedBefore = (engramLog().match(/Feedback helpful on /g) ?? []).length;
        await clickInWebview((text) => /requested lines/.test(text), 'button[data-action="feedback"][data-verdict="helpful"]');
        const fed = await waitFor(() => {
            const lines = engramLog().match(/Feedback helpful on [^\n]*/g) ?? [];
            return lines.length > fedBefore ? lines[lines.length - 1] : undefined;
        }, 'the feedback to be recorded');
        observed.feedback = fed;
        check('Helpful in the explain view records feedback', /confidence now 58%/.test(fed), fed);
        await shot('feedback');

        // Add Note to Selection: a warning note on the symbol's lines; the hover then shows it first.
        await page.locator('.tab', { hasText: config.file.split('/').pop() }).first().click();
        await goToLine(config.line, 1);
        await page.keyboard.press('Shift+ArrowDown');
        await page.keyboard.press('Shift+End');
        await runCommand('Engram: Add Note to Selection');
        const kindInput = page.locator('.quick-input-widget input');
        await page.locator('.quick-input-list .monaco-list-row', { hasText: 'warning' }).first().waitFor({ timeout });
        await kindInput.fill('warning');
        await page.keyboard.press('Enter');
        await page.locator('.quick-input-widget', { hasText: 'warning note' }).waitFor({ timeout });
        await kindInput.fill('main() is what the release script calls: keep its name');
        await page.keyboard.press('Enter');
        const noted = await waitFor(() => engramLog().match(/Note \(warning\) on [^\n]*/)?.[0], 'the note to be written');
        observed.note = noted;
        check('Add Note to Selection writes a note', /tape [0-9a-f]{8}/.test(noted), noted);
        await page.keyboard.press('Escape');
        await goToLine(config.line, 5);
        let noteHover = '';
        await waitFor(async () => {
            await page.keyboard.press('Escape');
            await page.keyboard.press('Control+K');
            await page.keyboard.press('Control+I');
            noteHover = await waitFor(async () => (await hoverShown().allInnerTexts()).join('\n').trim() || undefined, 'a hover', 5000).catch(() => '');
            return /Warning note/.test(noteHover);
        }, 'the hover to show the warning note', timeout, 500).catch(() => undefined);
        observed.noteHover = noteHover;
        check('the hover shows the warning note first', /^⚠\s*Warning note: main\(\) is what the release script calls/.test(noteHover.replace(/^\s+/, '')), noteHover);
        const commitSubject = config.expect?.commit;
        if (commitSubject) {
            check('the hover names the commit', noteHover.includes(commitSubject), noteHover);
        }
        await shot('note-hover');
        await page.keyboard.press('Escape');

        // Review Branch (a webview of engram/review for <base>..HEAD) and Stats (a Markdown document).
        await runCommand('Engram: Review Branch');
        const rangeInput = page.locator('.quick-input-widget input');
        await waitFor(async () => /\.\.HEAD$/.test(await rangeInput.inputValue()), 'the suggested range');
        observed.reviewRange = await rangeInput.inputValue();
        await page.keyboard.press('Enter');
        const review = await waitFor(() => webviewText('added lines written by agent sessions'), 'the review view');
        observed.review = review.text;
        for (const w of config.expect?.review ?? []) {
            check(`review view contains ${JSON.stringify(w)}`, review.text.includes(w), review.text.slice(0, 600));
        }
        await webviewSettled('added lines written by agent sessions');
        await shot('review');
        await runCommand('Engram: Stats');
        await page.locator('.quick-input-list .monaco-list-row', { hasText: 'harness' }).first().waitFor({ timeout });
        await page.locator('.quick-input-widget input').fill('harness');
        await page.keyboard.press('Enter');
        await page.locator('.quick-input-list .monaco-list-row', { hasText: 'Every indexed session' }).first().waitFor({ timeout });
        await page.locator('.quick-input-widget input').fill('Every indexed');
        await page.keyboard.press('Enter');
        const stats = await waitFor(() => webviewText('Engram stats by harness'), 'the stats document');
        observed.stats = stats.text;
        check('Stats shows the sessions by harness', /Scope: every indexed session/.test(stats.text) && /claude_code/.test(stats.text) && /total/.test(stats.text), stats.text.slice(0, 400));
        await webviewSettled('Engram stats by harness');
        await shot('stats');
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
        // saved: the file on disk has the new settings and the tab is no longer dirty
        const settingsFile = join(userData, 'User', 'settings.json');
        await waitFor(() => {
            const saved = JSON.parse(readFileSync(settingsFile, 'utf8'));
            return saved['engram.codeLens.enabled'] === false && saved['engram.hover.enabled'] === false;
        }, 'settings.json to be saved with the new settings');
        await page.locator('.tab.active.dirty', { hasText: 'settings.json' }).waitFor({ state: 'detached' });
        await page.locator('.tab', { hasText: config.file.split('/').pop() }).first().click();
        await waitFor(async () => (await page.locator('.codelens-decoration a').count()) === 0, 'the code lens to disappear').catch(async (error) => {
            await runCommand('Engram: Show Log');
            observed.log = (await panelText().catch(() => '')).slice(-4000);
            throw error;
        });
        check('engram.codeLens.enabled = false removes the lens', true);
        // The extension has the new settings (it logs them as it sends them to the server); its hover
        // middleware reads engram.hover.enabled on every hover.
        await waitFor(() => /Settings changed: .*"hover":\{"enabled":false\}/.test(engramLog()), 'the extension to log hover.enabled = false');
        await goToLine(config.line, 5);
        const traced = engramLog().length;
        await page.keyboard.press('Control+K');
        await page.keyboard.press('Control+I');
        // An absence check: VS Code shows nothing, and signals nothing, when no hover provider
        // answers, so this window deliberately lets time pass: 2.5 s, or 3x what the enabled hover
        // took above if that was longer; it ends as soon as an Engram hover shows.
        const engramHover = async () => {
            const text = (await hoverShown().allInnerTexts()).join('\n');
            return /Engram/.test(text) ? text : undefined;
        };
        const hoverWindow = Math.max(2500, 3 * (observed.hoverMs ?? 0));
        const hoverOff = (await firstWithin(engramHover, hoverWindow)) ?? (await hoverShown().allInnerTexts()).join('\n');
        observed.hoverWhenDisabled = hoverOff;
        check('engram.hover.enabled = false: no Engram hover', !/Engram/.test(hoverOff), hoverOff);
        // and the client asked the server for none (the protocol trace in the Engram log)
        const hoverRequests = engramLog().slice(traced).match(/Sending request 'textDocument\/hover/g) ?? [];
        check('engram.hover.enabled = false: no textDocument/hover request', hoverRequests.length === 0, `${hoverRequests.length} sent`);
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
    // until every process of the group has exited (signal 0: is any left?), then kill what is left
    await waitFor(() => {
        try {
            process.kill(-cs.pid, 0);
            return false;
        } catch {
            return true;
        }
    }, "code-server's process group to exit", 5000, 100).catch(() => {});
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
