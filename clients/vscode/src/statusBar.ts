/** The "Engram" status-bar item: server state, indexing progress, session count, errors. */
import * as vscode from 'vscode';
import { Commands } from './common/constants';
import type { ProgressState } from './common/server';

type State =
    | { kind: 'starting' }
    | { kind: 'running'; sessions?: number; live?: number }
    | { kind: 'indexing'; title?: string; message?: string; percentage?: number }
    | { kind: 'stopped' }
    | { kind: 'error'; message: string };

export class StatusBar implements vscode.Disposable {
    private readonly item: vscode.StatusBarItem;
    private state: State = { kind: 'starting' };
    private counts: { sessions?: number; live?: number } = {};
    private readonly active = new Map<string | number, ProgressState>();

    constructor() {
        this.item = vscode.window.createStatusBarItem('engram.status', vscode.StatusBarAlignment.Right, 100);
        this.item.name = 'Engram';
        this.item.command = Commands.showStatus;
        this.render();
        this.item.show();
    }

    setServerState(state: 'starting' | 'running' | 'stopped' | 'error', detail?: string): void {
        this.active.clear();
        if (state === 'error') {
            this.state = { kind: 'error', message: detail ?? 'The Engram server failed.' };
        } else if (state === 'running') {
            this.state = { kind: 'running', ...this.counts };
        } else {
            this.state = { kind: state };
        }
        this.render();
    }

    setCounts(counts: { sessions?: number; live?: number }): void {
        this.counts = counts;
        if (this.state.kind === 'running') {
            this.state = { kind: 'running', ...counts };
            this.render();
        }
    }

    /** Returns true when the last active progress ended (time to refresh the counts). */
    setProgress(progress: ProgressState): boolean {
        if (progress.done) {
            this.active.delete(progress.token);
        } else {
            this.active.set(progress.token, progress);
        }
        if (this.state.kind === 'error' || this.state.kind === 'stopped' || this.state.kind === 'starting') {
            return false;
        }
        const current = [...this.active.values()].pop();
        this.state = current
            ? { kind: 'indexing', title: current.title, message: current.message, percentage: current.percentage }
            : { kind: 'running', ...this.counts };
        this.render();
        return !current;
    }

    private render(): void {
        const s = this.state;
        const tooltip = new vscode.MarkdownString(undefined, true);
        this.item.backgroundColor = undefined;
        switch (s.kind) {
            case 'starting':
                this.item.text = '$(loading~spin) Engram';
                tooltip.appendMarkdown('Engram: starting the language server…');
                break;
            case 'running': {
                const n = s.sessions;
                this.item.text = n === undefined ? '$(history) Engram' : `$(history) Engram: ${n} session${n === 1 ? '' : 's'}`;
                tooltip.appendMarkdown(
                    n === undefined ? 'Engram: server running' : `Engram: ${n} session${n === 1 ? '' : 's'} indexed${s.live ? `, ${s.live} live` : ''}`,
                );
                break;
            }
            case 'indexing': {
                const pct = s.percentage !== undefined ? ` ${Math.round(s.percentage)}%` : '';
                this.item.text = `$(sync~spin) Engram: indexing${pct}`;
                tooltip.appendText(`Engram: ${s.title ?? 'indexing'}${s.message ? ` — ${s.message}` : ''}`);
                break;
            }
            case 'stopped':
                this.item.text = '$(circle-slash) Engram';
                tooltip.appendMarkdown('Engram: server stopped');
                break;
            case 'error':
                this.item.text = '$(error) Engram';
                this.item.backgroundColor = new vscode.ThemeColor('statusBarItem.errorBackground');
                tooltip.appendText(`Engram: ${s.message}`);
                break;
        }
        tooltip.appendMarkdown('\n\nClick for status and log.');
        this.item.tooltip = tooltip;
    }

    dispose(): void {
        this.item.dispose();
    }
}
