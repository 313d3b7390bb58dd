/**
 * The webview panels: "Engram: Explain" (sessions, transcript windows, lineage for a span) and
 * "Engram: Tape" (a tape around an event, stepping backward/forward). HTML comes from render.ts;
 * this module only owns the panels, the requests and the messages from the page.
 */
import { randomBytes } from 'node:crypto';
import * as vscode from 'vscode';
import { EXPAND_STEP, Requests } from './common/constants';
import { errorMessage, traceError, traceInfo } from './common/log';
import type { EngramServer } from './common/server';
import { renderExplainHtml, renderExplainMarkdown, renderMessageHtml, renderViewHtml, shortId } from './render';
import type { ExplainResult, ViewResult } from './types';

export interface LspRange {
    start: { line: number; character: number };
    end: { line: number; character: number };
}

export interface ExplainQuery {
    uri: string;
    range: LspRange;
    before: number;
    after: number;
    minConfidence: number;
}

/** Read-only `engram:` documents (explain as Markdown, status). */
export class VirtualDocuments implements vscode.TextDocumentContentProvider {
    static readonly scheme = 'engram';
    private readonly contents = new Map<string, string>();
    private readonly changed = new vscode.EventEmitter<vscode.Uri>();
    readonly onDidChange = this.changed.event;

    provideTextDocumentContent(uri: vscode.Uri): string {
        return this.contents.get(uri.toString()) ?? '';
    }

    /** Open (or refresh) a read-only document; `preview` shows Markdown rendered when it can. */
    async open(name: string, content: string, language: string, preview = false): Promise<void> {
        const uri = vscode.Uri.from({ scheme: VirtualDocuments.scheme, path: `/${name}` });
        this.contents.set(uri.toString(), content);
        this.changed.fire(uri);
        if (preview && language === 'markdown') {
            try {
                await vscode.commands.executeCommand('markdown.showPreviewToSide', uri);
                return;
            } catch {
                // no Markdown extension: show the source below
            }
        }
        const doc = await vscode.workspace.openTextDocument(uri);
        await vscode.languages.setTextDocumentLanguage(doc, language);
        await vscode.window.showTextDocument(doc, { viewColumn: vscode.ViewColumn.Beside, preview: true });
    }
}

/** "Open session" counts as using the answer (`engram used`: the session's salience goes up). */
export async function markUsed(server: EngramServer, tapeId: string): Promise<void> {
    try {
        await server.request(Requests.used, { session: tapeId });
    } catch (error) {
        traceError('engram/used failed', error);
    }
}

function nonce(): string {
    return randomBytes(16).toString('base64').replace(/[^A-Za-z0-9]/g, '');
}

function isExplainResult(value: unknown): value is ExplainResult {
    return typeof value === 'object' && value !== null && Array.isArray((value as ExplainResult).sessions);
}

abstract class Panel implements vscode.Disposable {
    protected panel: vscode.WebviewPanel | undefined;
    private readonly disposables: vscode.Disposable[] = [];

    constructor(
        private readonly viewType: string,
        private readonly title: string,
    ) {}

    protected ensurePanel(): vscode.WebviewPanel {
        if (this.panel) {
            this.panel.reveal(undefined, true);
            return this.panel;
        }
        const panel = vscode.window.createWebviewPanel(
            this.viewType,
            this.title,
            { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
            { enableScripts: true, enableCommandUris: false, localResourceRoots: [], retainContextWhenHidden: false },
        );
        panel.onDidDispose(() => (this.panel = undefined), undefined, this.disposables);
        panel.webview.onDidReceiveMessage((message) => this.onMessage(message), undefined, this.disposables);
        this.panel = panel;
        return panel;
    }

    protected pageOptions(): { nonce: string; cspSource: string } {
        return { nonce: nonce(), cspSource: this.ensurePanel().webview.cspSource };
    }

    protected showMessage(title: string, message: string, actions: Array<[string, string]> = []): void {
        const panel = this.ensurePanel();
        panel.webview.html = renderMessageHtml(title, message, this.pageOptions(), actions);
    }

    protected abstract onMessage(message: Record<string, string>): void;

    dispose(): void {
        this.panel?.dispose();
        for (const d of this.disposables.splice(0)) {
            d.dispose();
        }
    }
}

export class TapeView extends Panel {
    private current: { tapeId: string; at: number; before: number; after: number } | undefined;

    constructor(private readonly server: EngramServer) {
        super('engram.tape', 'Engram: Tape');
    }

    async show(tapeId: string, at: number, before: number, after: number): Promise<void> {
        this.current = { tapeId, at, before, after };
        const panel = this.ensurePanel();
        panel.title = `Engram: Tape ${shortId(tapeId, 8)}`;
        try {
            const result = await this.server.request<ViewResult>(Requests.view, { tapeId, at, before, after });
            if (this.current?.tapeId !== tapeId || this.current.at !== at) {
                return; // a newer request replaced this one
            }
            panel.webview.html = renderViewHtml(result ?? {}, { ...this.pageOptions(), tapeId, at, before, after });
            const label = result?.label ?? result?.meta?.label;
            if (typeof label === 'string' && label) {
                panel.title = `Engram: ${label.length > 40 ? `${label.slice(0, 39)}…` : label}`;
            }
        } catch (error) {
            traceError('engram/view failed', error);
            this.showMessage('Could not open the tape', errorMessage(error), [['Show log', 'log']]);
        }
    }

    protected onMessage(message: Record<string, string>): void {
        if (message.action === 'openTape' && message.tapeId && this.current) {
            void this.show(message.tapeId, Number(message.at) || 0, this.current.before, this.current.after);
        } else if (message.action === 'step' && this.current) {
            const at = Number(message.at);
            if (Number.isInteger(at) && at >= 0) {
                void this.show(this.current.tapeId, at, this.current.before, this.current.after);
            }
        } else if (message.action === 'log') {
            void vscode.commands.executeCommand('engram.showLog');
        }
    }
}

export class ExplainView extends Panel {
    private query: ExplainQuery | undefined;
    private result: ExplainResult | undefined;
    private generation = 0;

    constructor(
        private readonly server: EngramServer,
        private readonly tapes: TapeView,
        private readonly docs: VirtualDocuments,
    ) {
        super('engram.explain', 'Engram: Explain');
    }

    /** The last result shown (the "Open Session at Anchor" command offers its sessions). */
    get lastResult(): ExplainResult | undefined {
        return this.result;
    }

    /** Ask the server and show the answer. */
    async explain(query: ExplainQuery): Promise<void> {
        const generation = ++this.generation;
        this.query = query;
        this.showMessage('Engram: Explain', 'Looking up the sessions behind this code…');
        try {
            const result = await this.server.request<unknown>(Requests.explain, {
                textDocument: { uri: query.uri },
                range: query.range,
                before: query.before,
                after: query.after,
                minConfidence: query.minConfidence,
            });
            if (generation !== this.generation) {
                return;
            }
            if (!isExplainResult(result)) {
                throw new Error('the server answered engram/explain without a "sessions" list');
            }
            this.render(result);
        } catch (error) {
            if (generation !== this.generation) {
                return;
            }
            traceError('engram/explain failed', error);
            this.result = undefined;
            this.showMessage('Engram: Explain failed', errorMessage(error), [
                ['Retry', 'refresh'],
                ['Show log', 'log'],
            ]);
        }
    }

    /** Show a result the server already computed (code lens / hover link → `engram.explain`). */
    showResult(result: unknown, query: ExplainQuery): void {
        this.generation++;
        this.query = query;
        if (!isExplainResult(result)) {
            // The server ran the command but returned no result object: ask for it.
            void this.explain(query);
            return;
        }
        this.render(result);
    }

    private render(result: ExplainResult): void {
        this.result = result;
        const panel = this.ensurePanel();
        const query = this.query;
        panel.webview.html = renderExplainHtml(result, {
            ...this.pageOptions(),
            before: query?.before ?? 3,
            after: query?.after ?? 3,
            expandStep: EXPAND_STEP,
        });
        const n = result.sessions.length;
        panel.title = `Engram: ${n} session${n === 1 ? '' : 's'}`;
    }

    /** A feedback button: `engram/feedback` about this session for the explained span. */
    private async feedback(tapeId: string, verdict: string): Promise<void> {
        const query = this.query;
        try {
            const result = await this.server.request<{ confidence?: number; validations?: number }>(Requests.feedback, {
                session: tapeId,
                verdict,
                ...(query ? { textDocument: { uri: query.uri }, range: query.range } : {}),
            });
            const confidence = typeof result?.confidence === 'number' ? ` (confidence now ${Math.round(result.confidence * 100)}%)` : '';
            traceInfo(`Feedback ${verdict} on ${tapeId}${confidence}`);
            void vscode.window.showInformationMessage(`Engram: feedback "${verdict.replace('_', ' ')}" recorded for ${shortId(tapeId)}${confidence}.`);
        } catch (error) {
            traceError('engram/feedback failed', error);
            void vscode.window.showErrorMessage(`Engram: feedback failed: ${errorMessage(error)}`);
        }
    }

    protected onMessage(message: Record<string, string>): void {
        switch (message.action) {
            case 'expand':
                if (this.query) {
                    void this.explain({ ...this.query, before: this.query.before + EXPAND_STEP, after: this.query.after + EXPAND_STEP });
                }
                break;
            case 'refresh':
                if (this.query) {
                    void this.explain(this.query);
                }
                break;
            case 'markdown':
                if (this.result) {
                    void this.docs.open('explain.md', renderExplainMarkdown(this.result), 'markdown');
                }
                break;
            case 'openTape': {
                const at = Number(message.at);
                if (message.tapeId) {
                    void this.tapes.show(message.tapeId, Number.isInteger(at) ? at : 0, this.query?.before ?? 5, this.query?.after ?? 5);
                    void markUsed(this.server, message.tapeId);
                }
                break;
            }
            case 'feedback':
                if (message.tapeId && message.verdict) {
                    void this.feedback(message.tapeId, message.verdict);
                }
                break;
            case 'log':
                void vscode.commands.executeCommand('engram.showLog');
                break;
        }
    }
}
