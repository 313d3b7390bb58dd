import * as vscode from 'vscode';
import { CLIENT_NAME } from './constants';

let channel: vscode.LogOutputChannel | undefined;

/** The one "Engram" output channel; the language client writes its own log and traces there too. */
export function getLogChannel(): vscode.LogOutputChannel {
    if (!channel) {
        channel = vscode.window.createOutputChannel(CLIENT_NAME, { log: true });
    }
    return channel;
}

export function traceInfo(message: string): void {
    getLogChannel().info(message);
}

export function traceWarn(message: string): void {
    getLogChannel().warn(message);
}

export function traceError(message: string, error?: unknown): void {
    if (error === undefined) {
        getLogChannel().error(message);
    } else {
        getLogChannel().error(`${message}: ${errorMessage(error)}`);
    }
}

export function errorMessage(error: unknown): string {
    if (error instanceof Error) {
        return error.message;
    }
    if (typeof error === 'object' && error !== null && 'message' in error) {
        return String((error as { message: unknown }).message);
    }
    return String(error);
}

export function disposeLog(): void {
    channel?.dispose();
    channel = undefined;
}
