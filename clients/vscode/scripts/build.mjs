// Bundle the extension (dist/extension.js) and, with --tests, the unit tests (out/test/unit/*.test.js).
// Usage: node scripts/build.mjs [--production] [--watch] [--tests]
import * as esbuild from 'esbuild';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const production = process.argv.includes('--production');
const watch = process.argv.includes('--watch');
const tests = process.argv.includes('--tests');

const common = { bundle: true, platform: 'node', target: 'node20', format: 'cjs', logLevel: 'warning', absWorkingDir: root };

const builds = [
    {
        ...common,
        entryPoints: ['src/extension.ts'],
        outfile: 'dist/extension.js',
        external: ['vscode'],
        minify: production,
        sourcemap: !production,
        sourcesContent: false,
    },
];
if (tests) {
    const dir = join(root, 'test', 'unit');
    const entries = readdirSync(dir).filter((f) => f.endsWith('.test.ts')).map((f) => `test/unit/${f}`);
    // Unit tests cover pure modules only; bundling 'vscode' would fail loudly, which is the point.
    builds.push({ ...common, entryPoints: entries, outdir: 'out/test/unit', sourcemap: 'inline' });
}

if (watch) {
    for (const options of builds) {
        const ctx = await esbuild.context(options);
        await ctx.watch();
    }
    console.log('esbuild: watching…');
} else {
    await Promise.all(builds.map((options) => esbuild.build(options)));
}
