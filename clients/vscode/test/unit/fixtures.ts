import type { ExplainResult } from '../../src/types';

/** The hand-written example of the original design contract, in the shape documented in
 * docs/architecture.md, "The explain result". */
export const DESIGN_EXAMPLE: ExplainResult = {
    span: { file: 'src/auth.py', start: 42, end: 60, requested: [42, 48] },
    sessions: [
        {
            tape_id: '9f2c...', harness: 'claude_code', session: '4b1e...', tier: 'agent',
            label: 'Fix the auth timeout bug', model: 'claude-sonnet-4', cwd: '/repo',
            first_t: '2026-02-15T17:30:00Z', last_t: '2026-02-15T18:02:11Z',
            confidence: 0.92, touches: 3, via: 'direct',
            signals: { fingerprint: 0.92, semantic: null },
            windows: [
                { anchor: 42, kind: 'code.edit', confidence: 0.92, file: 'src/auth.py',
                  events: [{ offset: 40, t: '...', k: 'msg.out', text: '...' }] },
            ],
        },
    ],
    lineage: [{ from: { tape_id: '...', offset: 42 }, to: { tape_id: '...', offset: 7 },
                confidence: 0.61, location_delta: 'moved', cardinality: '1:1',
                agent_link: false }],
    tombstones: [],
    truncated: { fanout: false, edges: false },
    stats: { fingerprints: 118, matched: 109, elapsed_ms: 4.1 },
};

export const EMPTY_RESULT: ExplainResult = {
    span: { file: 'src/util.py', start: 1, end: 9, requested: [3, 3] },
    sessions: [],
    lineage: [],
    tombstones: [],
    truncated: { fanout: false, edges: false },
    stats: { fingerprints: 20, matched: 0, elapsed_ms: 0.7 },
};

/** A fuller transcript window: user request, reasoning, the edit, and hostile text. */
export const RICH_RESULT: ExplainResult = {
    span: { file: 'app/<b>x</b>.py', start: 10, end: 14, requested: [10, 10] },
    sessions: [
        {
            tape_id: 'aaaabbbbccccddddeeeeffff00001111', harness: 'codex', session: 's-1', tier: 'agent',
            label: 'Add <script>alert(1)</script> guard', model: 'gpt-5', first_t: '2026-03-01T09:00:00Z',
            last_t: '2026-03-02T10:00:00Z', confidence: 0.5, touches: 1, via: 'lineage',
            windows: [
                {
                    anchor: 12, kind: 'code.edit', confidence: 0.5, file: 'app/x.py',
                    events: [
                        { offset: 10, t: '2026-03-01T09:00:00Z', k: 'msg.in', text: 'Please add a guard <script>alert("pwn")</script>' },
                        { offset: 11, t: '2026-03-01T09:00:05Z', k: 'msg.out', text: 'I will check `x` & return early.' },
                        { offset: 12, t: '2026-03-01T09:00:09Z', k: 'code.edit', file: 'app/x.py', before_range: [10, 11], after_range: [10, 12],
                          before_text: 'def f(x):\n    return x\n', after_text: 'def f(x):\n    if x is None: return "</pre>"\n    return x\n' },
                        { offset: 13, t: '2026-03-01T09:00:10Z', k: 'tool.result', tool: 'shell', stdout: 'ok ```` fence', exit: 0 },
                    ],
                },
            ],
        },
    ],
    lineage: [],
    tombstones: [],
    truncated: { fanout: true, edges: false },
    stats: { fingerprints: 10, matched: 5, elapsed_ms: 1 },
};
