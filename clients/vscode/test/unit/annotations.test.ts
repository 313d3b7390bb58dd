import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AnnotateResult, colorOf, isAnnotateResult, PALETTE, runDecorations, sessionLabel, summarize } from '../../src/annotationModel';

const RESULT: AnnotateResult = {
    uri: 'file:///repo/a.py',
    version: 3,
    lines: 30,
    sessions: [
        { tape_id: 'aaaa', session: 's1', harness: 'claude_code', model: 'm', label: 'create hello.py,\n md and js', lines: 5 },
        { tape_id: 'bbbb', session: 's2', harness: 'codex', label: null, lines: 3 },
    ],
    runs: [
        { start: 0, end: 4, session: 0, via: 'log' },
        { start: 10, end: 12, session: 1, via: 'direct' },
        { start: 28, end: 29, session: 0, via: 'direct' },
    ],
};

describe('line annotation model', () => {
    it('one colour per session, by its index', () => {
        assert.equal(colorOf(0), 0);
        assert.equal(colorOf(PALETTE.length + 1), 1);
        const runs = runDecorations(RESULT, 30);
        assert.deepEqual(runs.map((r) => [r.start, r.end, r.color]), [[0, 4, 0], [10, 12, 1], [28, 29, 0]]);
    });

    it('labels with the request, else the session id', () => {
        assert.equal(sessionLabel(RESULT.sessions[0]), 'create hello.py, md and js · claude_code');
        assert.equal(sessionLabel(RESULT.sessions[1]), 's2 · codex');
    });

    it('the hover names the session and how it was found', () => {
        const [first, second] = runDecorations(RESULT, 30);
        assert.match(first.hover, /lines 1–5 written by/);
        assert.match(first.hover, /through the logged edits/);
        assert.match(second.hover, /by fingerprints/);
        assert.match(second.hover, /\(no request logged\)/);
    });

    it('clips runs to a buffer that got shorter', () => {
        const runs = runDecorations(RESULT, 11);
        assert.deepEqual(runs.map((r) => [r.start, r.end]), [[0, 4], [10, 10]]);
    });

    it('summarizes and recognizes answers', () => {
        assert.equal(summarize(RESULT), '2 sessions, 10 of 30 lines, 3 runs');
        assert.ok(isAnnotateResult(RESULT));
        assert.ok(!isAnnotateResult({ sessions: [] }));
        assert.ok(!isAnnotateResult(null));
    });
});
