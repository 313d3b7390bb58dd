/**
 * "Engram: Toggle Line Annotations": every line of the visible files marked by the session that
 * wrote it (one engram/annotate request per file), one colour per session — a coloured bar and a
 * faint background on the lines, the session's request after the first line of each run, its details
 * in a hover. Hand-written lines stay unmarked. Refreshed after edits (debounced), when another file
 * becomes visible and after every ingest; the toggle applies to all editors and is kept per workspace.
 */
import * as vscode from 'vscode';
import { Requests } from './common/constants';
import { errorMessage, traceError, traceInfo } from './common/log';
import type { EngramServer } from './common/server';
import { AnnotateResult, isAnnotateResult, PALETTE, runDecorations, summarize } from './annotationModel';

const STATE_KEY = 'engram.annotations';
const CONTEXT_KEY = 'engram.annotationsOn';
const EDIT_DELAY_MS = 400;

export class Annotations implements vscode.Disposable {
    private enabled: boolean;
    private readonly lineTypes: vscode.TextEditorDecorationType[];
    private readonly labelTypes: vscode.TextEditorDecorationType[];
    private readonly timers = new Map<string, ReturnType<typeof setTimeout>>();
    private readonly asked = new Map<string, number>();
    private readonly disposables: vscode.Disposable[] = [];
    /** The last answer per document (the e2e test and "Explain" read it). */
    readonly results = new Map<string, AnnotateResult>();

    constructor(
        private readonly server: EngramServer,
        private readonly memento: vscode.Memento,
    ) {
        this.enabled = memento.get<boolean>(STATE_KEY, false);
        this.lineTypes = PALETTE.map((color) =>
            vscode.window.createTextEditorDecorationType({
                isWholeLine: true,
                borderWidth: '0 0 0 3px',
                borderStyle: 'solid',
                borderColor: color,
                backgroundColor: `${color}1a`,
                overviewRulerColor: color,
                overviewRulerLane: vscode.OverviewRulerLane.Left,
            }),
        );
        this.labelTypes = PALETTE.map((color) =>
            vscode.window.createTextEditorDecorationType({
                after: { color, margin: '0 0 0 3em', fontStyle: 'italic' },
            }),
        );
        void vscode.commands.executeCommand('setContext', CONTEXT_KEY, this.enabled);
        this.disposables.push(
            vscode.window.onDidChangeVisibleTextEditors(() => this.enabled && this.refreshVisible()),
            vscode.workspace.onDidChangeTextDocument((event) => this.enabled && this.schedule(event.document)),
            vscode.workspace.onDidCloseTextDocument((doc) => this.results.delete(doc.uri.toString())),
        );
    }

    get on(): boolean {
        return this.enabled;
    }

    async toggle(): Promise<void> {
        this.enabled = !this.enabled;
        await this.memento.update(STATE_KEY, this.enabled);
        await vscode.commands.executeCommand('setContext', CONTEXT_KEY, this.enabled);
        traceInfo(`Line annotations ${this.enabled ? 'on' : 'off'}`);
        if (this.enabled) {
            await this.refreshVisible();
            const editor = vscode.window.activeTextEditor;
            const result = editor && this.results.get(editor.document.uri.toString());
            if (result) {
                vscode.window.setStatusBarMessage(`Engram: ${summarize(result)}`, 5000);
            }
        } else {
            this.clear();
        }
    }

    /** After an ingest or a server (re)start: the answers may have changed. */
    async refreshVisible(): Promise<void> {
        if (!this.enabled) {
            return;
        }
        await Promise.all(vscode.window.visibleTextEditors.filter((e) => e.document.uri.scheme === 'file').map((e) => this.annotate(e)));
    }

    private schedule(document: vscode.TextDocument): void {
        const key = document.uri.toString();
        clearTimeout(this.timers.get(key));
        this.timers.set(
            key,
            setTimeout(() => {
                this.timers.delete(key);
                for (const editor of vscode.window.visibleTextEditors) {
                    if (editor.document === document) {
                        void this.annotate(editor);
                    }
                }
            }, EDIT_DELAY_MS),
        );
    }

    private async annotate(editor: vscode.TextEditor): Promise<void> {
        const document = editor.document;
        const key = document.uri.toString();
        const ask = (this.asked.get(key) ?? 0) + 1;
        this.asked.set(key, ask);
        let result: unknown;
        const started = Date.now();
        try {
            result = await this.server.request<unknown>(Requests.annotate, { textDocument: { uri: key } });
        } catch (error) {
            traceError(`engram/annotate failed for ${document.uri.fsPath}`, error);
            if (this.asked.get(key) === ask) {
                vscode.window.setStatusBarMessage(`Engram: no annotation (${errorMessage(error)})`, 5000);
            }
            return;
        }
        // a newer request for this document, the toggle switched off, or the buffer changed meanwhile
        if (this.asked.get(key) !== ask || !this.enabled || !isAnnotateResult(result)) {
            return;
        }
        if (result.version !== null && result.version !== document.version) {
            return;
        }
        this.results.set(key, result);
        this.draw(editor, result);
        traceInfo(`Annotated ${vscode.workspace.asRelativePath(document.uri)}: ${summarize(result)} (${Date.now() - started} ms)`);
    }

    private draw(editor: vscode.TextEditor, result: AnnotateResult): void {
        const lines: vscode.DecorationOptions[][] = PALETTE.map(() => []);
        const labels: vscode.DecorationOptions[][] = PALETTE.map(() => []);
        const doc = editor.document;
        for (const run of runDecorations(result, doc.lineCount)) {
            lines[run.color].push({ range: new vscode.Range(run.start, 0, run.end, 0) });
            const end = doc.lineAt(run.start).range.end;
            const hover = new vscode.MarkdownString(run.hover);
            labels[run.color].push({
                range: new vscode.Range(end, end),
                hoverMessage: hover,
                renderOptions: { after: { contentText: `◆ ${run.label}` } },
            });
        }
        PALETTE.forEach((_c, i) => {
            editor.setDecorations(this.lineTypes[i], lines[i]);
            editor.setDecorations(this.labelTypes[i], labels[i]);
        });
    }

    private clear(): void {
        for (const editor of vscode.window.visibleTextEditors) {
            for (const type of [...this.lineTypes, ...this.labelTypes]) {
                editor.setDecorations(type, []);
            }
        }
        this.results.clear();
    }

    dispose(): void {
        for (const timer of this.timers.values()) {
            clearTimeout(timer);
        }
        for (const d of [...this.disposables, ...this.lineTypes, ...this.labelTypes]) {
            d.dispose();
        }
    }
}
