/** Identifiers shared by the extension's modules. No VS Code import: unit tests load this file. */

export const EXTENSION_ID = 'engram.engram-vscode';
export const CLIENT_ID = 'engram';
export const CLIENT_NAME = 'Engram';
export const CONFIG_SECTION = 'engram';
export const PYTHON_MODULE = 'engram_lsp';
export const SERVER_EXECUTABLE = 'engram-lsp';
export const PYTHON_EXTENSION_ID = 'ms-python.python';

/** Commands the server advertises in `executeCommandProvider`. vscode-languageclient registers them
 * itself; the extension must never register the same ids (activation fails with "command already
 * exists"). */
export const ServerCommands = {
    explain: 'engram.explain',
    reindex: 'engram.reindex',
} as const;

/** The extension's own (client-side) commands, as contributed in package.json. */
export const Commands = {
    showExplain: 'engram.showExplain',
    openSession: 'engram.openSession',
    searchSessions: 'engram.searchSessions',
    reindex: 'engram.reindexIndex',
    showStatus: 'engram.showStatus',
    restart: 'engram.restart',
    showLog: 'engram.showLog',
    toggleAnnotations: 'engram.toggleAnnotations',
    reviewBranch: 'engram.reviewBranch',
    showStats: 'engram.showStats',
    addNote: 'engram.addNote',
} as const;

/** Custom requests of engram-lsp (see docs/architecture.md, "Language server"). */
export const Requests = {
    explain: 'engram/explain',
    view: 'engram/view',
    search: 'engram/search',
    status: 'engram/status',
    annotate: 'engram/annotate',
    review: 'engram/review',
    stats: 'engram/stats',
    note: 'engram/note',
    feedback: 'engram/feedback',
    used: 'engram/used',
} as const;

/** How much "Expand window" widens the transcript window on each side. */
export const EXPAND_STEP = 5;
/** Number of hits asked from engram/search. */
export const SEARCH_LIMIT = 50;
