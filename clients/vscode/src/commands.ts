/** The extension's command-palette commands (ids in constants.Commands; none clashes with the
 * server's own `engram.explain` / `engram.reindex`). */
import * as vscode from 'vscode';
import { Commands, SEARCH_LIMIT, ServerCommands, Requests } from './common/constants';
import { errorMessage, getLogChannel, traceError, traceInfo } from './common/log';
import type { EngramServer } from './common/server';
import type { ExplainView, LspRange, TapeView, VirtualDocuments } from './explainView';
import { renderStatusMarkdown, searchHits, sessionTitle, shortId, summarizeStatus } from './render';
import { enclosingBlock } from './blocks';
import type { StatusBar } from './statusBar';
import type { Annotations } from './annotations';
import { addNote, reviewBranch, ReviewView, showStats } from './workflow';
import { markUsed } from './explainView';

export interface CommandContext {
    server: EngramServer;
    explainView: ExplainView;
    tapeView: TapeView;
    docs: VirtualDocuments;
    statusBar: StatusBar;
    annotations: Annotations;
    reviewView: ReviewView;
}

const BLOCK_KINDS = new Set([
    vscode.SymbolKind.Function,
    vscode.SymbolKind.Method,
    vscode.SymbolKind.Class,
    vscode.SymbolKind.Constructor,
    vscode.SymbolKind.Interface,
    vscode.SymbolKind.Struct,
    vscode.SymbolKind.Enum,
    vscode.SymbolKind.Module,
]);

/** Innermost function/class symbol containing `line`, from the language's symbol provider. */
async function symbolBlock(document: vscode.TextDocument, line: number): Promise<[number, number] | undefined> {
    let symbols: Array<vscode.DocumentSymbol | vscode.SymbolInformation> | undefined;
    try {
        symbols = await vscode.commands.executeCommand('vscode.executeDocumentSymbolProvider', document.uri);
    } catch {
        return undefined;
    }
    let best: vscode.Range | undefined;
    const visit = (list: Array<vscode.DocumentSymbol | vscode.SymbolInformation>) => {
        for (const sym of list) {
            const range = 'range' in sym ? sym.range : sym.location.range;
            if (range.start.line <= line && line <= range.end.line) {
                if (BLOCK_KINDS.has(sym.kind) && (!best || best.contains(range))) {
                    best = range;
                }
                if ('children' in sym && sym.children) {
                    visit(sym.children);
                }
            }
        }
    };
    visit(symbols ?? []);
    return best ? [best.start.line, best.end.line] : undefined;
}

/** The range sent to engram/explain: the selection; with nothing selected, the function/class
 * around the cursor (from the language's symbols, else by indentation), else its paragraph. */
export async function explainRange(selection: vscode.Selection, document: vscode.TextDocument): Promise<LspRange> {
    if (selection.isEmpty) {
        const line = selection.active.line;
        const lines = Array.from({ length: document.lineCount }, (_, i) => document.lineAt(i).text);
        const [start, end] = (await symbolBlock(document, line)) ?? enclosingBlock(lines, line);
        return { start: { line: start, character: 0 }, end: { line: end, character: document.lineAt(end).text.length } };
    }
    let end = selection.end;
    // A selection of whole lines ends at column 0 of the next line: that line is not part of it.
    if (end.character === 0 && end.line > selection.start.line) {
        end = document.lineAt(end.line - 1).range.end;
    }
    return {
        start: { line: selection.start.line, character: selection.start.character },
        end: { line: end.line, character: end.character },
    };
}

async function showExplain(ctx: CommandContext): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor) {
        void vscode.window.showInformationMessage('Engram: open a file and select the code to explain.');
        return;
    }
    const settings = ctx.server.settings;
    await ctx.explainView.explain({
        uri: editor.document.uri.toString(),
        range: await explainRange(editor.selection, editor.document),
        before: settings.window.before,
        after: settings.window.after,
        minConfidence: settings.minConfidence,
    });
}

async function openSession(ctx: CommandContext, tapeId?: unknown, at?: unknown): Promise<void> {
    let tape = typeof tapeId === 'string' ? tapeId : undefined;
    let offset = typeof at === 'number' ? at : undefined;
    if (!tape) {
        const sessions = ctx.explainView.lastResult?.sessions ?? [];
        type Item = vscode.QuickPickItem & { tapeId?: string; anchor?: number };
        const items: Item[] = sessions.map((s) => ({
            label: sessionTitle(s),
            description: [s.harness, s.model, `tape ${shortId(s.tape_id)}`].filter(Boolean).join(' · '),
            tapeId: s.tape_id,
            anchor: s.windows?.[0]?.anchor,
        }));
        items.push({ label: '$(edit) Enter a tape id…' });
        const pick = await vscode.window.showQuickPick(items, {
            title: 'Engram: Open Session at Anchor',
            placeHolder: sessions.length ? 'A session from the last Explain, or a tape id' : 'Enter a tape id',
        });
        if (!pick) {
            return;
        }
        tape = pick.tapeId;
        offset = pick.anchor;
        if (!tape) {
            tape = (await vscode.window.showInputBox({ title: 'Engram: tape id', prompt: 'The tape id (hex) to open', ignoreFocusOut: true }))?.trim();
            if (!tape) {
                return;
            }
        }
    }
    if (offset === undefined) {
        const answer = await vscode.window.showInputBox({
            title: 'Engram: event offset',
            prompt: 'Event offset in the tape (0 = its start)',
            value: '0',
            validateInput: (v) => (/^\d+$/.test(v.trim()) ? undefined : 'A non-negative whole number'),
        });
        if (answer === undefined) {
            return;
        }
        offset = Number(answer.trim());
    }
    const settings = ctx.server.settings;
    await ctx.tapeView.show(tape, offset, Math.max(settings.window.before, 5), Math.max(settings.window.after, 5));
    void markUsed(ctx.server, tape);
}

async function searchSessions(ctx: CommandContext): Promise<void> {
    const query = await vscode.window.showInputBox({
        title: 'Engram: Search Sessions',
        prompt: 'Text to find in the indexed sessions (messages, code, tool output)',
        ignoreFocusOut: true,
    });
    if (!query?.trim()) {
        return;
    }
    let result: unknown;
    try {
        result = await vscode.window.withProgress(
            { location: vscode.ProgressLocation.Window, title: 'Engram: searching' },
            () => ctx.server.request(Requests.search, { query: query.trim(), limit: SEARCH_LIMIT }),
        );
    } catch (error) {
        traceError('engram/search failed', error);
        void vscode.window.showErrorMessage(`Engram: search failed: ${errorMessage(error)}`);
        return;
    }
    const hits = searchHits(result);
    if (!hits.length) {
        void vscode.window.showInformationMessage(`Engram: no sessions mention "${query.trim()}".`);
        return;
    }
    const pick = await vscode.window.showQuickPick(
        hits.map((h) => ({ label: h.title, description: h.description, detail: h.detail, hit: h })),
        { title: `Engram: ${hits.length} match${hits.length === 1 ? '' : 'es'} for "${query.trim()}"`, matchOnDescription: true, matchOnDetail: true },
    );
    if (pick) {
        await openSession(ctx, pick.hit.tapeId, pick.hit.offset);
    }
}

async function reindex(ctx: CommandContext): Promise<void> {
    try {
        const result = await vscode.window.withProgress(
            { location: vscode.ProgressLocation.Window, title: 'Engram: reindexing' },
            () => ctx.server.executeServerCommand(ServerCommands.reindex),
        );
        traceInfo(`Reindex: ${JSON.stringify(result)}`);
        await refreshStatus(ctx);
    } catch (error) {
        traceError('Reindex failed', error);
        void vscode.window.showErrorMessage(`Engram: reindex failed: ${errorMessage(error)}`, 'Show Log').then((c) => c && getLogChannel().show());
    }
}

/** Ask engram/status and update the status bar; returns the raw status (undefined when not running). */
export async function refreshStatus(ctx: CommandContext): Promise<unknown> {
    if (!ctx.server.languageClient) {
        return undefined;
    }
    try {
        const status = await ctx.server.request<unknown>(Requests.status, {});
        ctx.statusBar.setCounts(summarizeStatus(status));
        return status;
    } catch (error) {
        traceError('engram/status failed', error);
        return undefined;
    }
}

async function showStatus(ctx: CommandContext): Promise<void> {
    const resolution = ctx.server.resolution;
    const client: Array<[string, string]> = [];
    if (resolution?.ok) {
        client.push(['Server command', [resolution.command, ...resolution.args].join(' ')], ['Found via', resolution.source]);
    }
    if (ctx.server.error) {
        client.push(['Error', ctx.server.error]);
    }
    const status = await refreshStatus(ctx);
    if (status === undefined) {
        const choice = await vscode.window.showErrorMessage(
            `Engram: ${ctx.server.error ?? 'the server is not running.'}`,
            'Show Log',
            'Restart Server',
            'Open Settings',
        );
        if (choice === 'Show Log') {
            getLogChannel().show();
        } else if (choice === 'Restart Server') {
            await ctx.server.restart();
        } else if (choice === 'Open Settings') {
            await vscode.commands.executeCommand('workbench.action.openSettings', 'engram.server');
        }
        return;
    }
    await ctx.docs.open('status.md', renderStatusMarkdown(status, client), 'markdown', true);
}

export function registerCommands(ctx: CommandContext): vscode.Disposable[] {
    const run = (fn: (...args: unknown[]) => Promise<void>) => async (...args: unknown[]) => {
        try {
            await fn(...args);
        } catch (error) {
            traceError('Command failed', error);
            void vscode.window.showErrorMessage(`Engram: ${errorMessage(error)}`);
        }
    };
    return [
        vscode.commands.registerCommand(Commands.showExplain, run(() => showExplain(ctx))),
        vscode.commands.registerCommand(Commands.openSession, run((tapeId, at) => openSession(ctx, tapeId, at))),
        vscode.commands.registerCommand(Commands.searchSessions, run(() => searchSessions(ctx))),
        vscode.commands.registerCommand(Commands.reindex, run(() => reindex(ctx))),
        vscode.commands.registerCommand(Commands.showStatus, run(() => showStatus(ctx))),
        vscode.commands.registerCommand(Commands.restart, run(() => ctx.server.restart())),
        vscode.commands.registerCommand(Commands.showLog, () => getLogChannel().show()),
        vscode.commands.registerCommand(Commands.toggleAnnotations, run(() => ctx.annotations.toggle())),
        vscode.commands.registerCommand(Commands.reviewBranch, run(() => reviewBranch(ctx.reviewView))),
        vscode.commands.registerCommand(Commands.showStats, run(() => showStats(ctx.server, ctx.docs))),
        vscode.commands.registerCommand(Commands.addNote, run(() => addNote(ctx.server))),
    ];
}
