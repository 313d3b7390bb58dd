import * as vscode from 'vscode';
import { Annotations } from './annotations';
import { registerCommands, refreshStatus } from './commands';
import { CONFIG_SECTION } from './common/constants';
import { disposeLog, getLogChannel, traceInfo } from './common/log';
import { EngramServer } from './common/server';
import { RESTART_KEYS } from './common/settings';
import { ExplainView, LspRange, TapeView, VirtualDocuments } from './explainView';
import { StatusBar } from './statusBar';
import { ReviewView } from './workflow';

let server: EngramServer | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
    context.subscriptions.push(getLogChannel());
    const statusBar = new StatusBar();
    const docs = new VirtualDocuments();
    // The hooks close over `ctx`, filled in right below.
    // eslint-disable-next-line prefer-const
    let ctx: Parameters<typeof registerCommands>[0];
    server = new EngramServer({
        onStateChange: (state, detail) => {
            statusBar.setServerState(state, detail);
            if (state === 'running') {
                void refreshStatus(ctx);
                void annotations.refreshVisible();
            }
        },
        onProgress: (progress) => {
            if (statusBar.setProgress(progress)) {
                void refreshStatus(ctx);
            }
            if (progress.done) {
                void annotations.refreshVisible(); // an ingest ended: the annotation may have changed
            }
        },
        onExplainCommandResult: (result, args) => {
            const [uri, range] = args as [string, LspRange];
            const settings = server!.settings;
            explainView.showResult(result, {
                uri: String(uri),
                range,
                before: settings.window.before,
                after: settings.window.after,
                minConfidence: settings.minConfidence,
            });
        },
    });
    const tapeView = new TapeView(server);
    const explainView = new ExplainView(server, tapeView, docs);
    const annotations = new Annotations(server, context.workspaceState);
    const reviewView = new ReviewView(server);
    ctx = { server, explainView, tapeView, docs, statusBar, annotations, reviewView };

    context.subscriptions.push(
        statusBar,
        tapeView,
        explainView,
        annotations,
        reviewView,
        vscode.workspace.registerTextDocumentContentProvider(VirtualDocuments.scheme, docs),
        ...registerCommands(ctx),
        vscode.workspace.onDidChangeConfiguration((event) => {
            if (!event.affectsConfiguration(CONFIG_SECTION)) {
                return;
            }
            if (RESTART_KEYS.some((key) => event.affectsConfiguration(key))) {
                traceInfo('Server settings changed: restarting the server.');
                void server?.restart();
            } else {
                server?.pushSettings();
            }
        }),
    );
    traceInfo(`Engram extension ${context.extension.packageJSON.version} activating`);
    // Not awaited: activation never waits for the server (probing interpreters can take seconds).
    void server.restart();
}

export async function deactivate(): Promise<void> {
    await server?.dispose();
    server = undefined;
    disposeLog();
}
