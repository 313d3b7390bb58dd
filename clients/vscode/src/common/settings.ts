/**
 * Reading the `engram.*` settings and deciding how to start the server. Pure: no VS Code import, so
 * the unit tests exercise it directly. `server.ts` supplies the VS Code and file-system probes.
 */
import { PYTHON_MODULE, SERVER_EXECUTABLE } from './constants';

export type NotificationLevel = 'off' | 'onError' | 'always';

export interface EngramSettings {
    server: { path: string; pythonPath: string; args: string[] };
    codeLens: { enabled: boolean; minSessions: number };
    hover: { enabled: boolean };
    window: { before: number; after: number; sessions: number };
    minConfidence: number;
    showNotifications: NotificationLevel;
    /** Unset (undefined): Engram's config files decide (`sharing.autoPull`, `sharing.pullInterval`). */
    sharing: { autoPull?: boolean; pullInterval?: number };
}

/** What the server receives as `initializationOptions`, in `workspace/didChangeConfiguration` and as
 * the answer to `workspace/configuration` (section `engram`). Keys as in docs/editors.md "Settings",
 * plus `showNotifications` (engram-lsp filters its own window/showMessage by it). */
export interface ServerSettings {
    window: { before: number; after: number; sessions: number };
    minConfidence: number;
    codeLens: { enabled: boolean; minSessions: number };
    hover: { enabled: boolean };
    showNotifications: NotificationLevel;
    sharing?: { autoPull?: boolean; pullInterval?: number };
}

export const DEFAULTS: EngramSettings = {
    server: { path: '', pythonPath: '', args: [] },
    codeLens: { enabled: true, minSessions: 1 },
    hover: { enabled: true },
    window: { before: 3, after: 3, sessions: 3 },
    minConfidence: 0.5,
    showNotifications: 'onError',
    sharing: {},
};

/** The subset of `vscode.WorkspaceConfiguration` this module needs. */
export interface ConfigReader {
    get<T>(key: string): T | undefined;
}

/** Values substituted in path settings. */
export interface PathVariables {
    workspaceFolder?: string;
    userHome?: string;
}

function str(value: unknown, fallback: string): string {
    return typeof value === 'string' ? value.trim() : fallback;
}

function bool(value: unknown, fallback: boolean): boolean {
    return typeof value === 'boolean' ? value : fallback;
}

function int(value: unknown, fallback: number, min: number): number {
    return typeof value === 'number' && Number.isFinite(value) ? Math.max(min, Math.floor(value)) : fallback;
}

function ratio(value: unknown, fallback: number): number {
    return typeof value === 'number' && Number.isFinite(value) ? Math.min(1, Math.max(0, value)) : fallback;
}

const LEVELS: readonly NotificationLevel[] = ['off', 'onError', 'always'];

/** Read `engram.*` from a configuration, falling back to defaults for missing or mistyped values. */
export function readSettings(config: ConfigReader, vars: PathVariables = {}): EngramSettings {
    const args = config.get<unknown>('server.args');
    const level = config.get<unknown>('showNotifications');
    return {
        server: {
            path: expandPath(str(config.get('server.path'), ''), vars),
            pythonPath: expandPath(str(config.get('server.pythonPath'), ''), vars),
            args: Array.isArray(args) ? args.filter((a): a is string => typeof a === 'string') : [],
        },
        codeLens: {
            enabled: bool(config.get('codeLens.enabled'), DEFAULTS.codeLens.enabled),
            minSessions: int(config.get('codeLens.minSessions'), DEFAULTS.codeLens.minSessions, 1),
        },
        hover: { enabled: bool(config.get('hover.enabled'), DEFAULTS.hover.enabled) },
        window: {
            before: int(config.get('window.before'), DEFAULTS.window.before, 0),
            after: int(config.get('window.after'), DEFAULTS.window.after, 0),
            sessions: int(config.get('window.sessions'), DEFAULTS.window.sessions, 0),
        },
        minConfidence: ratio(config.get('minConfidence'), DEFAULTS.minConfidence),
        showNotifications: LEVELS.includes(level as NotificationLevel)
            ? (level as NotificationLevel)
            : DEFAULTS.showNotifications,
        sharing: readSharing(config),
    };
}

/** `engram.sharing.*`: only what the user set (null or unset leaves it to Engram's config). */
function readSharing(config: ConfigReader): EngramSettings['sharing'] {
    const out: EngramSettings['sharing'] = {};
    const autoPull = config.get<unknown>('sharing.autoPull');
    if (typeof autoPull === 'boolean') {
        out.autoPull = autoPull;
    }
    const interval = config.get<unknown>('sharing.pullInterval');
    if (typeof interval === 'number' && Number.isFinite(interval)) {
        out.pullInterval = Math.max(60, interval);
    }
    return out;
}

export function toServerSettings(settings: EngramSettings): ServerSettings {
    return {
        window: { ...settings.window },
        minConfidence: settings.minConfidence,
        codeLens: { ...settings.codeLens },
        hover: { ...settings.hover },
        showNotifications: settings.showNotifications,
        ...(Object.keys(settings.sharing).length ? { sharing: { ...settings.sharing } } : {}),
    };
}

/** Settings whose change needs a new server process (the rest is pushed to the running one). */
export const RESTART_KEYS = ['engram.server.path', 'engram.server.pythonPath', 'engram.server.args'];

/** `~`, `${userHome}`, `${workspaceFolder}` in a path setting. Unknown variables stay as they are. */
export function expandPath(value: string, vars: PathVariables): string {
    let out = value;
    if (vars.userHome && (out === '~' || out.startsWith('~/'))) {
        out = vars.userHome + out.slice(1);
    }
    out = out.replace(/\$\{(userHome|workspaceFolder)\}/g, (whole, name: keyof PathVariables) => vars[name] ?? whole);
    return out;
}

/** Whether a message of the given LSP MessageType (1 error … 4 log) should become a notification. */
export function shouldNotify(level: NotificationLevel, messageType: number): boolean {
    switch (level) {
        case 'off':
            return false;
        case 'onError':
            return messageType === 1;
        default:
            return messageType <= 3;
    }
}

// ---------------------------------------------------------------------------------------------------
// Server command resolution

export type ServerSource = 'engram.server.path' | 'engram.server.pythonPath' | 'python-extension' | 'PATH';

export interface ServerCommand {
    ok: true;
    command: string;
    args: string[];
    source: ServerSource;
    /** One line per candidate that was considered, for the log. */
    tried: string[];
}

export interface ServerCommandError {
    ok: false;
    /** What went wrong and how to fix it; shown to the user. */
    message: string;
    /** The setting the user most likely has to change. */
    setting?: string;
    tried: string[];
}

export type ServerResolution = ServerCommand | ServerCommandError;

/** Everything `resolveServerCommand` needs from the outside world. */
export interface ServerProbe {
    /** Whether `path` is an existing executable file. */
    isExecutable(path: string): Promise<boolean>;
    /** Whether `python -c "import engram_lsp"` succeeds; the error text otherwise. */
    canImport(python: string[]): Promise<{ ok: true } | { ok: false; reason: string }>;
    /** Full path of an executable found on PATH. */
    which(name: string): Promise<string | undefined>;
    /** The Python extension's interpreter (a command line) when that extension is installed. */
    pythonExtensionInterpreter(): Promise<string[] | undefined>;
}

const INSTALL_HINT =
    'Install Engram into a Python environment (`pip install engram`, or `pip install -e .` in an Engram checkout)';

/**
 * Decide how to start engram-lsp, in this order:
 * 1. `engram.server.path` (an engram-lsp executable), used as is;
 * 2. `engram.server.pythonPath` + `-m engram_lsp`;
 * 3. the Python extension's selected interpreter, when that extension is installed and the
 *    interpreter has Engram;
 * 4. `engram-lsp` on PATH.
 * An explicitly set path that does not work is an error (never silently skipped).
 */
export async function resolveServerCommand(
    server: EngramSettings['server'],
    probe: ServerProbe,
): Promise<ServerResolution> {
    const tried: string[] = [];
    const extra = server.args;

    if (server.path) {
        if (await probe.isExecutable(server.path)) {
            tried.push(`engram.server.path: ${server.path}`);
            return { ok: true, command: server.path, args: [...extra], source: 'engram.server.path', tried };
        }
        tried.push(`engram.server.path: ${server.path} (not an executable file)`);
        return {
            ok: false,
            setting: 'engram.server.path',
            message:
                `The setting engram.server.path points to "${server.path}", which is not an executable file. ` +
                `Fix the path (it should be the engram-lsp program), or clear the setting to find the server automatically.`,
            tried,
        };
    }

    if (server.pythonPath) {
        const check = await probe.canImport([server.pythonPath]);
        if (check.ok) {
            tried.push(`engram.server.pythonPath: ${server.pythonPath}`);
            return {
                ok: true,
                command: server.pythonPath,
                args: ['-m', PYTHON_MODULE, ...extra],
                source: 'engram.server.pythonPath',
                tried,
            };
        }
        tried.push(`engram.server.pythonPath: ${server.pythonPath} (${check.reason})`);
        return {
            ok: false,
            setting: 'engram.server.pythonPath',
            message:
                `The interpreter in engram.server.pythonPath ("${server.pythonPath}") cannot start the Engram server: ` +
                `${check.reason}. ${INSTALL_HINT} for that interpreter, or point the setting at one that has it.`,
            tried,
        };
    }

    const interpreter = await probe.pythonExtensionInterpreter();
    if (interpreter && interpreter.length > 0) {
        const check = await probe.canImport(interpreter);
        if (check.ok) {
            tried.push(`Python extension interpreter: ${interpreter.join(' ')}`);
            return {
                ok: true,
                command: interpreter[0],
                args: [...interpreter.slice(1), '-m', PYTHON_MODULE, ...extra],
                source: 'python-extension',
                tried,
            };
        }
        tried.push(`Python extension interpreter: ${interpreter.join(' ')} (${check.reason})`);
    } else {
        tried.push('Python extension: not installed or no interpreter selected');
    }

    const onPath = await probe.which(SERVER_EXECUTABLE);
    if (onPath) {
        tried.push(`PATH: ${onPath}`);
        return { ok: true, command: onPath, args: [...extra], source: 'PATH', tried };
    }
    tried.push(`PATH: no ${SERVER_EXECUTABLE}`);

    return {
        ok: false,
        setting: 'engram.server.pythonPath',
        message:
            `Could not find the Engram language server (${SERVER_EXECUTABLE}). ${INSTALL_HINT}, then either ` +
            `make ${SERVER_EXECUTABLE} available on PATH, set engram.server.pythonPath to that environment's python, ` +
            `or set engram.server.path to the ${SERVER_EXECUTABLE} executable.`,
        tried,
    };
}

/** Find an executable on a PATH string (pure: the file check is injected). */
export async function whichOnPath(
    name: string,
    pathEnv: string | undefined,
    isExecutable: (p: string) => Promise<boolean>,
    separator = ':',
    join: (dir: string, file: string) => string = (d, f) => (d.endsWith('/') ? d + f : `${d}/${f}`),
): Promise<string | undefined> {
    for (const dir of (pathEnv ?? '').split(separator)) {
        if (!dir) {
            continue;
        }
        const candidate = join(dir, name);
        if (await isExecutable(candidate)) {
            return candidate;
        }
    }
    return undefined;
}
