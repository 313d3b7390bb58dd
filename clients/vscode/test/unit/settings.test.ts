import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
    ConfigReader,
    DEFAULTS,
    EngramSettings,
    ServerProbe,
    expandPath,
    readSettings,
    resolveServerCommand,
    shouldNotify,
    toServerSettings,
    whichOnPath,
} from '../../src/common/settings';

function config(values: Record<string, unknown>): ConfigReader {
    return { get: <T>(key: string) => values[key] as T | undefined };
}

interface World {
    executables?: string[];
    importable?: string[];
    pythonExt?: string[];
    path?: string;
}

function probe(world: World): ServerProbe & { calls: string[] } {
    const calls: string[] = [];
    const exe = new Set(world.executables ?? []);
    return {
        calls,
        isExecutable: async (p) => {
            calls.push(`isExecutable ${p}`);
            return exe.has(p);
        },
        canImport: async (python) => {
            calls.push(`canImport ${python.join(' ')}`);
            return (world.importable ?? []).includes(python[0]) ? { ok: true } : { ok: false, reason: "No module named 'engram_lsp'" };
        },
        which: (name) => whichOnPath(name, world.path, async (p) => exe.has(p)),
        pythonExtensionInterpreter: async () => world.pythonExt,
    };
}

const server = (s: Partial<EngramSettings['server']> = {}): EngramSettings['server'] => ({ path: '', pythonPath: '', args: [], ...s });

describe('resolveServerCommand', () => {
    it('1. engram.server.path wins and gets the extra args', async () => {
        const p = probe({ executables: ['/opt/engram-lsp', '/usr/bin/engram-lsp'], importable: ['/usr/bin/python3'], path: '/usr/bin' });
        const r = await resolveServerCommand(server({ path: '/opt/engram-lsp', pythonPath: '/usr/bin/python3', args: ['--log', 'x'] }), p);
        assert.deepEqual(r.ok && [r.command, r.args, r.source], ['/opt/engram-lsp', ['--log', 'x'], 'engram.server.path']);
    });

    it('1. a server.path that is not executable is an actionable error (no fallback)', async () => {
        const p = probe({ path: '/usr/bin', executables: ['/usr/bin/engram-lsp'] });
        const r = await resolveServerCommand(server({ path: '/nope/engram-lsp' }), p);
        assert.equal(r.ok, false);
        assert.ok(!r.ok);
        assert.equal(r.setting, 'engram.server.path');
        assert.match(r.message, /engram\.server\.path points to "\/nope\/engram-lsp", which is not an executable file/);
        assert.match(r.message, /clear the setting/);
    });

    it('2. engram.server.pythonPath runs -m engram_lsp', async () => {
        const p = probe({ importable: ['/venv/bin/python'] });
        const r = await resolveServerCommand(server({ pythonPath: '/venv/bin/python', args: ['--stdio'] }), p);
        assert.deepEqual(r.ok && [r.command, r.args, r.source], ['/venv/bin/python', ['-m', 'engram_lsp', '--stdio'], 'engram.server.pythonPath']);
    });

    it('2. a pythonPath without Engram is an error that says what to install', async () => {
        const p = probe({ pythonExt: ['/other/python'], importable: ['/other/python'] });
        const r = await resolveServerCommand(server({ pythonPath: '/venv/bin/python' }), p);
        assert.ok(!r.ok);
        assert.equal(r.setting, 'engram.server.pythonPath');
        assert.match(r.message, /No module named 'engram_lsp'/);
        assert.match(r.message, /pip install engram/);
        assert.ok(!p.calls.includes('canImport /other/python'), 'no silent fallback past an explicit setting');
    });

    it('3. the Python extension interpreter, when it has Engram', async () => {
        const p = probe({ pythonExt: ['conda', 'run', '-n', 'x', 'python'], importable: ['conda'], executables: ['/usr/bin/engram-lsp'], path: '/usr/bin' });
        const r = await resolveServerCommand(server(), p);
        assert.deepEqual(r.ok && [r.command, r.args, r.source], ['conda', ['run', '-n', 'x', 'python', '-m', 'engram_lsp'], 'python-extension']);
    });

    it('4. falls through a Python extension interpreter without Engram to engram-lsp on PATH', async () => {
        const p = probe({ pythonExt: ['/usr/bin/python3'], executables: ['/home/u/.local/bin/engram-lsp'], path: '/usr/bin::/home/u/.local/bin' });
        const r = await resolveServerCommand(server({ args: ['-v'] }), p);
        assert.deepEqual(r.ok && [r.command, r.args, r.source], ['/home/u/.local/bin/engram-lsp', ['-v'], 'PATH']);
        assert.ok(r.ok);
        assert.match(r.tried.join('\n'), /Python extension interpreter: \/usr\/bin\/python3 \(No module named/);
    });

    it('4. no Python extension at all: PATH', async () => {
        const p = probe({ executables: ['/bin/engram-lsp'], path: '/bin' });
        const r = await resolveServerCommand(server(), p);
        assert.equal(r.ok && r.source, 'PATH');
    });

    it('nothing found: a clear error naming the install and every setting', async () => {
        const r = await resolveServerCommand(server(), probe({ path: '/usr/bin' }));
        assert.ok(!r.ok);
        assert.match(r.message, /Could not find the Engram language server \(engram-lsp\)/);
        assert.match(r.message, /pip install engram/);
        assert.match(r.message, /engram\.server\.pythonPath/);
        assert.match(r.message, /engram\.server\.path/);
        assert.match(r.message, /PATH/);
        assert.equal(r.tried.length, 2);
    });
});

describe('readSettings', () => {
    it('defaults for an empty configuration', () => {
        assert.deepEqual(readSettings(config({})), DEFAULTS);
    });

    it('reads, clamps and expands', () => {
        const s = readSettings(
            config({
                'server.path': '  ~/bin/engram-lsp ',
                'server.pythonPath': '${workspaceFolder}/.venv/bin/python',
                'server.args': ['--a', 3, '--b'],
                'codeLens.enabled': false,
                'codeLens.minSessions': 0,
                'hover.enabled': false,
                'window.before': 7.9,
                'window.after': -2,
                'window.sessions': 10,
                minConfidence: 1.7,
                showNotifications: 'always',
                'sharing.autoPull': true,
                'sharing.pullInterval': 5,
            }),
            { userHome: '/home/u', workspaceFolder: '/ws' },
        );
        assert.deepEqual(s, {
            server: { path: '/home/u/bin/engram-lsp', pythonPath: '/ws/.venv/bin/python', args: ['--a', '--b'] },
            codeLens: { enabled: false, minSessions: 1 },
            hover: { enabled: false },
            window: { before: 7, after: 0, sessions: 10 },
            minConfidence: 1,
            showNotifications: 'always',
            sharing: { autoPull: true, pullInterval: 60 },
        });
    });

    it('ignores mistyped values', () => {
        const s = readSettings(config({ 'codeLens.enabled': 'no', 'window.before': 'x', minConfidence: NaN, showNotifications: 'loud' }));
        assert.equal(s.codeLens.enabled, true);
        assert.equal(s.window.before, 3);
        assert.equal(s.minConfidence, 0.5);
        assert.equal(s.showNotifications, 'onError');
    });
});

describe('toServerSettings', () => {
    it('has the keys of the server settings (docs/editors.md, + showNotifications)', () => {
        const s = toServerSettings(readSettings(config({ 'window.before': 5, 'codeLens.minSessions': 2 })));
        assert.deepEqual(s, {
            window: { before: 5, after: 3, sessions: 3 },
            minConfidence: 0.5,
            codeLens: { enabled: true, minSessions: 2 },
            hover: { enabled: true },
            showNotifications: 'onError',
        });
    });
    it('sends sharing.* only when the user set them (else Engram\'s config decides)', () => {
        const unset = toServerSettings(readSettings(config({ 'sharing.autoPull': null })));
        assert.equal('sharing' in unset, false);
        const set = toServerSettings(readSettings(config({ 'sharing.autoPull': true, 'sharing.pullInterval': 120 })));
        assert.deepEqual(set.sharing, { autoPull: true, pullInterval: 120 });
    });
});

describe('helpers', () => {
    it('expandPath leaves unknown variables and absent values alone', () => {
        assert.equal(expandPath('${workspaceFolder}/x', {}), '${workspaceFolder}/x');
        assert.equal(expandPath('${env:HOME}/x', { userHome: '/h' }), '${env:HOME}/x');
        assert.equal(expandPath('~', { userHome: '/h' }), '/h');
        assert.equal(expandPath('a~/b', { userHome: '/h' }), 'a~/b');
    });
    it('shouldNotify', () => {
        assert.deepEqual([1, 2, 3, 4].map((t) => shouldNotify('off', t)), [false, false, false, false]);
        assert.deepEqual([1, 2, 3, 4].map((t) => shouldNotify('onError', t)), [true, false, false, false]);
        assert.deepEqual([1, 2, 3, 4].map((t) => shouldNotify('always', t)), [true, true, true, false]);
    });
});
