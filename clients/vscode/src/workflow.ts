/**
 * The workflow commands: "Engram: Review Branch" (a webview of engram/review for the branch against
 * its upstream), "Engram: Stats" (engram/stats as a Markdown document) and "Engram: Add Note to
 * Selection" (engram/note on the selected lines).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as vscode from 'vscode';
import { Requests } from './common/constants';
import { errorMessage, traceError, traceInfo } from './common/log';
import type { EngramServer } from './common/server';
import type { VirtualDocuments } from './explainView';
import { isReviewResult, isStatsResult, renderReviewHtml, renderStatsMarkdown, reviewSummary } from './workflowRender';

export const NOTE_KINDS: Array<[string, string]> = [
    ['warning', 'Something the next person (or agent) must not break'],
    ['decision', 'Why the code is the way it is'],
    ['discovery', 'Something learnt about this code'],
    ['todo', 'Work left to do here'],
];
export const STATS_BY = ['model', 'harness', 'week', 'file', 'session'];

function git(cwd: string, args: string[]): Promise<string | undefined> {
    return new Promise((resolve) => {
        execFile('git', args, { cwd, timeout: 5000 }, (error, stdout) => resolve(error ? undefined : stdout.trim() || undefined));
    });
}

/** `<base>..HEAD`: the branch's upstream, else the remote's default branch, else main/master. */
export async function defaultReviewRange(cwd: string): Promise<string> {
    const base =
        (await git(cwd, ['rev-parse', '--abbrev-ref', '--symbolic-full-name', '@{upstream}'])) ??
        (await git(cwd, ['symbolic-ref', '--short', 'refs/remotes/origin/HEAD'])) ??
        ((await git(cwd, ['rev-parse', '--verify', '--quiet', 'main'])) ? 'main' : undefined) ??
        ((await git(cwd, ['rev-parse', '--verify', '--quiet', 'master'])) ? 'master' : undefined) ??
        'HEAD~1';
    return `${base}..HEAD`;
}

export class ReviewView implements vscode.Disposable {
    private panel: vscode.WebviewPanel | undefined;
    /** The last review shown (the e2e test and the log read it). */
    last: unknown;

    constructor(private readonly server: EngramServer) {}

    async show(range: string): Promise<void> {
        const panel = this.ensure();
        panel.title = `Engram: review ${range}`;
        const nonce = randomBytes(16).toString('base64').replace(/[^A-Za-z0-9]/g, '');
        const opts = { nonce, cspSource: panel.webview.cspSource };
        try {
            const result = await vscode.window.withProgress(
                { location: vscode.ProgressLocation.Window, title: `Engram: reviewing ${range}` },
                () => this.server.request<unknown>(Requests.review, { range }),
            );
            if (!isReviewResult(result)) {
                throw new Error('the server answered engram/review without a "commits" list');
            }
            this.last = result;
            panel.webview.html = renderReviewHtml(result, opts);
            traceInfo(`Review ${range}: ${reviewSummary(result)}`);
        } catch (error) {
            traceError(`engram/review ${range} failed`, error);
            panel.webview.html = renderReviewHtml({ range, commits: [], warnings: [errorMessage(error)] }, opts);
        }
    }

    private ensure(): vscode.WebviewPanel {
        if (this.panel) {
            this.panel.reveal(undefined, true);
            return this.panel;
        }
        this.panel = vscode.window.createWebviewPanel('engram.review', 'Engram: review', { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true }, {
            enableScripts: true,
            localResourceRoots: [],
        });
        this.panel.onDidDispose(() => (this.panel = undefined));
        return this.panel;
    }

    dispose(): void {
        this.panel?.dispose();
    }
}

export async function reviewBranch(view: ReviewView): Promise<void> {
    const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    const suggested = cwd ? await defaultReviewRange(cwd) : 'origin/main..HEAD';
    const range = await vscode.window.showInputBox({
        title: 'Engram: Review Branch',
        prompt: 'The commits to review, as git names them (A..B)',
        value: suggested,
        ignoreFocusOut: true,
        validateInput: (v) => (/\.\./.test(v) ? undefined : 'A range: A..B (e.g. origin/main..HEAD)'),
    });
    if (range?.trim()) {
        await view.show(range.trim());
    }
}

export async function showStats(server: EngramServer, docs: VirtualDocuments): Promise<void> {
    const by = await vscode.window.showQuickPick(STATS_BY, { title: 'Engram: Stats', placeHolder: 'Group the sessions by' });
    if (!by) {
        return;
    }
    const scope = await vscode.window.showQuickPick(
        [
            { label: 'This repository', detail: 'Sessions that ran inside this repository', all: false },
            { label: 'Every indexed session', detail: 'All the sessions of this machine\'s index', all: true },
        ],
        { title: `Engram: Stats by ${by}`, placeHolder: 'Which sessions' },
    );
    if (!scope) {
        return;
    }
    const result = await vscode.window.withProgress({ location: vscode.ProgressLocation.Window, title: 'Engram: stats' }, () =>
        server.request<unknown>(Requests.stats, { by, all: scope.all }),
    );
    if (!isStatsResult(result)) {
        throw new Error('the server answered engram/stats without "rows"');
    }
    await docs.open('stats.md', renderStatsMarkdown(result), 'markdown', true);
}

export async function addNote(server: EngramServer): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.uri.scheme !== 'file') {
        void vscode.window.showInformationMessage('Engram: select the lines of a file to add a note to.');
        return;
    }
    const doc = editor.document;
    const sel = editor.selection;
    let last = sel.end.line;
    if (sel.end.character === 0 && last > sel.start.line) {
        last -= 1; // a selection of whole lines ends at column 0 of the next one
    }
    const kind = await vscode.window.showQuickPick(
        NOTE_KINDS.map(([label, detail]) => ({ label, detail })),
        { title: `Engram: note on lines ${sel.start.line + 1}–${last + 1}`, placeHolder: 'What kind of note' },
    );
    if (!kind) {
        return;
    }
    const text = await vscode.window.showInputBox({ title: `Engram: ${kind.label} note`, prompt: 'The note (kept with the code; shared by engram push)', ignoreFocusOut: true });
    if (!text?.trim()) {
        return;
    }
    if (doc.isDirty && !(await doc.save())) {
        void vscode.window.showWarningMessage('Engram: save the file first: a note keeps the lines as they are on disk.');
        return;
    }
    const result = await server.request<{ tape_id?: string }>(Requests.note, {
        textDocument: { uri: doc.uri.toString() },
        range: { start: { line: sel.start.line, character: 0 }, end: { line: last, character: doc.lineAt(last).text.length } },
        kind: kind.label,
        text: text.trim(),
    });
    traceInfo(`Note (${kind.label}) on ${vscode.workspace.asRelativePath(doc.uri)}:${sel.start.line + 1}-${last + 1}: tape ${result?.tape_id ?? '?'}`);
    void vscode.window.showInformationMessage(`Engram: ${kind.label} note added to lines ${sel.start.line + 1}–${last + 1}.`);
}
