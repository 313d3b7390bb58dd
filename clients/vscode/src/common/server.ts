/**
 * Finding, starting, configuring and restarting engram-lsp. One `EngramServer` per window; it owns
 * the LanguageClient and recreates it on restart.
 */
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as vscode from 'vscode';
import {
    CloseAction,
    CodeLensRequest,
    ErrorAction,
    DidChangeConfigurationNotification,
    ExecuteCommandRequest,
    LanguageClient,
    LanguageClientOptions,
    Middleware,
    ServerOptions,
    ShowMessageNotification,
    State,
    StaticFeature,
    TransportKind,
    WorkDoneProgress,
    WorkDoneProgressBegin,
    WorkDoneProgressCreateRequest,
    WorkDoneProgressReport,
    WorkDoneProgressEnd,
} from 'vscode-languageclient/node';
import { CLIENT_ID, CLIENT_NAME, CONFIG_SECTION, PYTHON_EXTENSION_ID, PYTHON_MODULE, ServerCommands } from './constants';
import { errorMessage, getLogChannel, traceError, traceInfo, traceWarn } from './log';
import {
    EngramSettings,
    ServerProbe,
    ServerResolution,
    readSettings,
    resolveServerCommand,
    shouldNotify,
    toServerSettings,
    whichOnPath,
} from './settings';

/** What the server reports while indexing (from `$/progress`). */
export interface ProgressState {
    token: string | number;
    title?: string;
    message?: string;
    percentage?: number;
    done: boolean;
}

/** Callbacks into the UI (status bar, explain view). */
export interface ServerHooks {
    onStateChange(state: 'starting' | 'running' | 'stopped' | 'error', detail?: string): void;
    onProgress(progress: ProgressState): void;
    /** A code lens / hover link ran the server's `engram.explain`: show its result. */
    onExplainCommandResult(result: unknown, args: unknown[]): void;
}

export function currentSettings(resource?: vscode.Uri): EngramSettings {
    const folder = resource ? vscode.workspace.getWorkspaceFolder(resource) : vscode.workspace.workspaceFolders?.[0];
    return readSettings(vscode.workspace.getConfiguration(CONFIG_SECTION, resource), {
        workspaceFolder: folder?.uri.fsPath,
        userHome: os.homedir(),
    });
}

// ---------------------------------------------------------------------------------------------------
// Probes used to resolve the server command

async function isExecutable(file: string): Promise<boolean> {
    try {
        const stat = await fs.promises.stat(file);
        if (!stat.isFile()) {
            return false;
        }
        await fs.promises.access(file, process.platform === 'win32' ? fs.constants.F_OK : fs.constants.X_OK);
        return true;
    } catch {
        return false;
    }
}

function canImport(python: string[]): Promise<{ ok: true } | { ok: false; reason: string }> {
    return new Promise((resolve) => {
        execFile(
            python[0],
            [...python.slice(1), '-c', `import ${PYTHON_MODULE}`],
            { timeout: 20_000, windowsHide: true },
            (error, _stdout, stderr) => {
                if (!error) {
                    resolve({ ok: true });
                    return;
                }
                const code = (error as NodeJS.ErrnoException).code;
                if (code === 'ENOENT') {
                    resolve({ ok: false, reason: 'the interpreter does not exist' });
                    return;
                }
                if (error.killed) {
                    resolve({ ok: false, reason: 'the interpreter did not answer within 20 s' });
                    return;
                }
                const lines = String(stderr).trim().split('\n');
                const last = lines[lines.length - 1] || error.message;
                resolve({
                    ok: false,
                    reason: /No module named/.test(last) ? `Engram is not installed there (${last.trim()})` : last.trim(),
                });
            },
        );
    });
}

async function pythonExtensionInterpreter(resource?: vscode.Uri): Promise<string[] | undefined> {
    const extension = vscode.extensions.getExtension(PYTHON_EXTENSION_ID);
    if (!extension) {
        return undefined;
    }
    try {
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        const api: any = extension.isActive ? extension.exports : await extension.activate();
        const environments = api?.environments;
        if (environments?.getActiveEnvironmentPath && environments?.resolveEnvironment) {
            const active = environments.getActiveEnvironmentPath(resource);
            const resolved = await environments.resolveEnvironment(active);
            const exe: string | undefined = resolved?.executable?.uri?.fsPath;
            if (exe) {
                return [exe];
            }
        }
        const details = api?.settings?.getExecutionDetails?.(resource);
        if (Array.isArray(details?.execCommand) && details.execCommand.length > 0) {
            return details.execCommand as string[];
        }
    } catch (error) {
        traceWarn(`Could not ask the Python extension for its interpreter: ${errorMessage(error)}`);
    }
    return undefined;
}

export function createProbe(resource?: vscode.Uri): ServerProbe {
    return {
        isExecutable,
        canImport,
        which: (name) => whichOnPath(name, process.env.PATH, isExecutable, path.delimiter, path.join),
        pythonExtensionInterpreter: () => pythonExtensionInterpreter(resource),
    };
}

// ---------------------------------------------------------------------------------------------------
// The client

/** Takes over `window/workDoneProgress/create` (registered after the built-in progress feature, so it
 * replaces it) to feed the status bar, and shows a notification while indexing when asked to. */
class ProgressFeature implements StaticFeature {
    private readonly disposables: vscode.Disposable[] = [];

    constructor(
        private readonly client: LanguageClient,
        private readonly hooks: ServerHooks,
        private readonly settings: () => EngramSettings,
    ) {}

    fillClientCapabilities(capabilities: { window?: { workDoneProgress?: boolean } }): void {
        capabilities.window = capabilities.window ?? {};
        capabilities.window.workDoneProgress = true;
    }

    getState(): { kind: 'static' } {
        return { kind: 'static' };
    }

    initialize(): void {
        this.disposables.push(
            this.client.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
                this.track(token);
            }),
        );
    }

    private track(token: string | number): void {
        let finish: (() => void) | undefined;
        let report: ((value: { message?: string; increment?: number }) => void) | undefined;
        let lastPercentage = 0;
        const state: ProgressState = { token, done: false };
        const sub = this.client.onProgress(
            WorkDoneProgress.type,
            token,
            (value: WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd) => {
                if (value.kind === 'begin') {
                    state.title = value.title;
                    state.message = value.message;
                    state.percentage = value.percentage;
                    if (shouldNotify(this.settings().showNotifications, 3)) {
                        void vscode.window.withProgress(
                            { location: vscode.ProgressLocation.Notification, title: `Engram: ${value.title}` },
                            (progress) => {
                                report = (v) => progress.report(v);
                                return new Promise<void>((resolve) => (finish = resolve));
                            },
                        );
                    }
                } else if (value.kind === 'report') {
                    state.message = value.message ?? state.message;
                    state.percentage = value.percentage ?? state.percentage;
                    const increment = state.percentage !== undefined ? Math.max(0, state.percentage - lastPercentage) : undefined;
                    lastPercentage = state.percentage ?? lastPercentage;
                    report?.({ message: value.message, increment });
                } else {
                    state.message = value.message ?? state.message;
                    state.done = true;
                    finish?.();
                    sub.dispose();
                }
                this.hooks.onProgress({ ...state });
            },
        );
        this.disposables.push(sub);
    }

    clear(): void {
        this.dispose();
    }

    dispose(): void {
        for (const d of this.disposables.splice(0)) {
            d.dispose();
        }
    }
}

export class EngramServer implements vscode.Disposable {
    private client: LanguageClient | undefined;
    private lastResolution: ServerResolution | undefined;
    private lastError: string | undefined;
    private starting: Promise<void> | undefined;
    /** When the running server process ended unexpectedly (for the restart budget). */
    private crashes: number[] = [];
    settings: EngramSettings = currentSettings();

    constructor(private readonly hooks: ServerHooks) {}

    get languageClient(): LanguageClient | undefined {
        return this.client?.isRunning() ? this.client : undefined;
    }

    get resolution(): ServerResolution | undefined {
        return this.lastResolution;
    }

    get error(): string | undefined {
        return this.lastError;
    }

    /** Start (or restart) the server. Never throws: failures end up in the log, status bar and a message. */
    async restart(): Promise<void> {
        if (this.starting) {
            await this.starting;
        }
        this.starting = this.doRestart().finally(() => (this.starting = undefined));
        return this.starting;
    }

    private async doRestart(): Promise<void> {
        await this.stop();
        this.settings = currentSettings();
        this.lastError = undefined;
        this.hooks.onStateChange('starting');
        const resolution = await resolveServerCommand(this.settings.server, createProbe(vscode.workspace.workspaceFolders?.[0]?.uri));
        this.lastResolution = resolution;
        for (const line of resolution.tried) {
            traceInfo(`Server candidate: ${line}`);
        }
        if (!resolution.ok) {
            this.fail(resolution.message, resolution.setting);
            return;
        }
        traceInfo(`Starting ${CLIENT_NAME} server: ${[resolution.command, ...resolution.args].join(' ')} (from ${resolution.source})`);
        const client = this.createClient(resolution.command, resolution.args);
        this.client = client;
        try {
            await client.start();
            this.hooks.onStateChange('running');
        } catch (error) {
            this.client = undefined;
            try {
                await client.dispose();
            } catch {
                // already dead
            }
            this.fail(
                `The Engram server (${resolution.command}) did not start: ${errorMessage(error)}. ` +
                    'See the Engram log for its output; check engram.server.* settings.',
                resolution.source === 'engram.server.path' ? 'engram.server.path' : 'engram.server.pythonPath',
            );
        }
    }

    private fail(message: string, setting?: string): void {
        this.lastError = message;
        traceError(message);
        this.hooks.onStateChange('error', message);
        const actions = setting ? ['Open Settings', 'Show Log'] : ['Show Log'];
        void vscode.window.showErrorMessage(`Engram: ${message}`, ...actions).then((choice) => {
            if (choice === 'Open Settings') {
                void vscode.commands.executeCommand('workbench.action.openSettings', setting);
            } else if (choice === 'Show Log') {
                getLogChannel().show();
            }
        });
    }

    async stop(): Promise<void> {
        const client = this.client;
        this.client = undefined;
        if (!client) {
            return;
        }
        try {
            if (client.isRunning()) {
                await client.stop(5000);
            }
            await client.dispose();
        } catch (error) {
            traceWarn(`Stopping the server: ${errorMessage(error)}`);
        }
        this.hooks.onStateChange('stopped');
    }

    /** Push changed settings to the running server (no restart). */
    pushSettings(): void {
        const previous = this.settings;
        this.settings = currentSettings();
        const client = this.languageClient;
        if (!client) {
            return;
        }
        traceInfo(`Settings changed: sending them to the server (${JSON.stringify(toServerSettings(this.settings))})`);
        void client
            .sendNotification(DidChangeConfigurationNotification.type, { settings: { [CONFIG_SECTION]: toServerSettings(this.settings) } })
            .catch((error) => traceError('Sending the settings to the server failed', error));
        if (previous.codeLens.enabled !== this.settings.codeLens.enabled || previous.codeLens.minSessions !== this.settings.codeLens.minSessions) {
            this.refreshCodeLenses();
        }
    }

    /** Ask VS Code to request the lenses again (after codeLens.* changed). */
    refreshCodeLenses(): void {
        const feature = this.languageClient?.getFeature(CodeLensRequest.method);
        if (!feature) {
            return;
        }
        for (const editor of vscode.window.visibleTextEditors) {
            feature.getProvider(editor.document)?.onDidChangeCodeLensEmitter.fire();
        }
    }

    async request<R>(method: string, params: unknown): Promise<R> {
        const client = this.languageClient;
        if (!client) {
            throw new Error(this.lastError ?? 'The Engram server is not running. Run "Engram: Restart Server" or see the Engram log.');
        }
        return client.sendRequest<R>(method, params);
    }

    async executeServerCommand(command: string, args: unknown[] = []): Promise<unknown> {
        const client = this.languageClient;
        if (!client) {
            throw new Error(this.lastError ?? 'The Engram server is not running.');
        }
        return client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args });
    }

    private createClient(command: string, args: string[]): LanguageClient {
        const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
        const serverOptions: ServerOptions = {
            command,
            args,
            transport: TransportKind.stdio,
            options: { cwd, env: { ...process.env, PYTHONUNBUFFERED: '1' } },
        };
        const settings = () => this.settings;
        const hooks = this.hooks;
        const middleware: Middleware = {
            provideHover: (document, position, token, next) =>
                settings().hover.enabled ? next(document, position, token) : undefined,
            provideCodeLenses: (document, token, next) => (settings().codeLens.enabled ? next(document, token) : []),
            executeCommand: async (cmd, cmdArgs, next) => {
                const result = await next(cmd, cmdArgs);
                if (cmd === ServerCommands.explain) {
                    hooks.onExplainCommandResult(result, cmdArgs);
                }
                return result;
            },
            workspace: {
                configuration: async (params, token, next) => {
                    const answers = await next(params, token);
                    if (!Array.isArray(answers)) {
                        return answers;
                    }
                    return params.items.map((item, i) =>
                        item.section === CONFIG_SECTION ? toServerSettings(currentSettings(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined)) : answers[i],
                    );
                },
            },
        };
        const clientOptions: LanguageClientOptions = {
            documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
            outputChannel: getLogChannel(),
            traceOutputChannel: getLogChannel(),
            revealOutputChannelOn: 4 /* RevealOutputChannelOn.Never */,
            initializationOptions: toServerSettings(this.settings),
            markdown: { isTrusted: { enabledCommands: [ServerCommands.explain, 'engram.showExplain', 'engram.openSession'] }, supportHtml: false },
            middleware,
            initializationFailedHandler: (error) => {
                traceError('Server initialization failed', error);
                return false;
            },
            errorHandler: {
                error: (_error, _message, count) => ({ action: (count ?? 0) <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown, handled: true }),
                closed: () => {
                    if (this.client !== client || client.state === State.Starting) {
                        // A failed start is reported by doRestart(); a replaced client is not ours to restart.
                        return { action: CloseAction.DoNotRestart, handled: true };
                    }
                    const now = Date.now();
                    this.crashes = [...this.crashes.filter((t) => now - t < 180_000), now];
                    if (this.crashes.length <= 4) {
                        traceWarn('The Engram server stopped unexpectedly; restarting it.');
                        return { action: CloseAction.Restart, handled: true };
                    }
                    this.fail('The Engram server stopped 5 times in 3 minutes and is not restarted again. See the Engram log, fix the cause, then run "Engram: Restart Server".');
                    return { action: CloseAction.DoNotRestart, handled: true };
                },
            },
        };
        const client = new LanguageClient(CLIENT_ID, CLIENT_NAME, serverOptions, clientOptions);
        client.registerFeature(new ProgressFeature(client, this.hooks, settings));
        // Registered before start, these replace the client's built-in showMessage handler.
        client.onNotification(ShowMessageNotification.type, ({ type, message }) => {
            const log = getLogChannel();
            (type === 1 ? log.error : type === 2 ? log.warn : log.info).call(log, `[server] ${message}`);
            if (!shouldNotify(this.settings.showNotifications, type)) {
                return;
            }
            const show = type === 1 ? vscode.window.showErrorMessage : type === 2 ? vscode.window.showWarningMessage : vscode.window.showInformationMessage;
            void show(`Engram: ${message}`, 'Show Log').then((choice) => choice && log.show());
        });
        client.onDidChangeState((event) => {
            if (event.newState === State.Stopped && this.client === client) {
                hooks.onStateChange('stopped');
            }
        });
        return client;
    }

    async dispose(): Promise<void> {
        await this.stop();
    }
}
