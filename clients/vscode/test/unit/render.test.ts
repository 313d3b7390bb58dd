import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
    codeBlock,
    escapeHtml,
    formatTimeSpan,
    renderExplainHtml,
    renderExplainMarkdown,
    renderStatusMarkdown,
    renderViewHtml,
    searchHits,
    summarizeStatus,
    viewNeighbours,
} from '../../src/render';
import { DESIGN_EXAMPLE, EMPTY_RESULT, RICH_RESULT } from './fixtures';

const OPTS = { nonce: 'N0nce123', cspSource: 'vscode-webview://abc', before: 3, after: 3, expandStep: 5 };

/** Text content of the HTML with tags removed and the common entities decoded. */
function textOf(html: string): string {
    return html
        .replace(/<script[\s\S]*?<\/script>/g, '')
        .replace(/<style[\s\S]*?<\/style>/g, '')
        .replace(/<[^>]+>/g, ' ')
        .replace(/&lt;/g, '<')
        .replace(/&gt;/g, '>')
        .replace(/&quot;/g, '"')
        .replace(/&#39;/g, "'")
        .replace(/&amp;/g, '&')
        .replace(/\s+/g, ' ');
}

describe('renderExplainHtml: the design example', () => {
    const html = renderExplainHtml(DESIGN_EXAMPLE, OPTS);
    const text = textOf(html);

    it('has a strict Content-Security-Policy with the nonce and no remote sources', () => {
        const csp = /<meta http-equiv="Content-Security-Policy" content="([^"]+)">/.exec(html);
        assert.ok(csp, 'CSP meta present');
        assert.match(csp[1], /default-src 'none'/);
        assert.match(csp[1], /script-src 'nonce-N0nce123'/);
        assert.doesNotMatch(csp[1], /unsafe-inline|unsafe-eval|https?:/);
        assert.doesNotMatch(html, /(src|href)="https?:/);
        const scripts = html.match(/<script[^>]*>/g) ?? [];
        assert.deepEqual(scripts, ['<script nonce="N0nce123">']);
    });

    it('shows the span and summary', () => {
        assert.match(text, /src\/auth\.py:42–60/);
        assert.match(text, /requested lines 42–48 · 1 session · 1 lineage edge · 109 of 118 fingerprints matched · 4\.1 ms/);
    });

    it('shows harness, model, time, confidence, via, tier and label', () => {
        assert.match(text, /1\. Fix the auth timeout bug/);
        assert.match(text, /Harness claude_code/);
        assert.match(text, /Model claude-sonnet-4/);
        assert.match(text, /Time 2026-02-15 17:30:00 UTC – 18:02:11/);
        assert.match(text, /Confidence 92%/);
        assert.match(text, /Via direct/);
        assert.match(text, /Tier agent/);
    });

    it('shows the window and its event', () => {
        assert.match(text, /Transcript window at event #42 · code\.edit · src\/auth\.py · 92%/);
        assert.match(text, /Assistant #40 · \.\.\./);
    });

    it('shows the lineage edge', () => {
        assert.match(text, /Lineage From To Confidence Location Cardinality Agent link \.\.\. #42 \.\.\. #7 61% moved 1:1 no/);
    });

    it('has Expand window and Open tape buttons wired by data attributes', () => {
        assert.match(html, /<button type="button" data-action="expand">Expand window \(8 before, 8 after\)<\/button>/);
        assert.match(html, /data-action="openTape" data-tape-id="9f2c\.\.\." data-at="42"/);
    });

    it('uses theme variables for colours', () => {
        assert.match(html, /var\(--vscode-editor-background\)/);
        assert.match(html, /var\(--vscode-foreground\)/);
        assert.doesNotMatch(html.replace(/var\([^)]*\)/g, ''), /background: #[0-9a-f]{3,6};/i);
    });
});

describe('renderExplainHtml: empty sessions', () => {
    const html = renderExplainHtml(EMPTY_RESULT, OPTS);
    const text = textOf(html);
    it('says there are no sessions and how to get some', () => {
        assert.match(text, /src\/util\.py:1–9/);
        assert.match(text, /0 sessions/);
        assert.match(text, /No agent sessions found for this span\./);
        assert.match(text, /Engram: Reindex/);
        assert.doesNotMatch(text, /Lineage/);
    });
    it('disables Expand window', () => {
        assert.match(html, /data-action="expand" disabled>/);
    });
});

describe('renderExplainHtml: escaping', () => {
    const html = renderExplainHtml(RICH_RESULT, OPTS);
    it('never lets transcript text become markup', () => {
        const body = html.slice(0, html.lastIndexOf('<script nonce'));
        assert.doesNotMatch(body, /<script/i, 'no script element besides the nonce one');
        assert.doesNotMatch(html, /<b>x<\/b>/);
        assert.match(html, /Please add a guard &lt;script&gt;alert\(&quot;pwn&quot;\)&lt;\/script&gt;/);
        assert.match(html, /Add &lt;script&gt;alert\(1\)&lt;\/script&gt; guard/);
        assert.match(html, /return &quot;&lt;\/pre&gt;&quot;/);
        assert.match(html, /I will check `x` &amp; return early\./);
    });
    it('highlights the anchor edit and shows it as a diff', () => {
        assert.match(html, /<div class="ev anchor" data-offset="12">/);
        assert.match(html, /<span class="del">- def f\(x\):<\/span>/);
        assert.match(html, /<span class="add">\+     if x is None: return &quot;&lt;\/pre&gt;&quot;<\/span>/);
        assert.match(html, /<div class="ev" data-offset="10">[\s\S]*?User/);
    });
    it('reports a truncated lineage walk', () => {
        assert.match(textOf(html), /Partial answer: the lineage walk hit its fan-out limit\./);
    });
});

describe('renderExplainMarkdown', () => {
    it('renders the design example', () => {
        const md = renderExplainMarkdown(DESIGN_EXAMPLE);
        assert.match(md, /^# Engram: src\/auth\\\.py:42–60$/m);
        assert.match(md, /^## 1\. Fix the auth timeout bug$/m);
        assert.match(md, /^- \*\*Harness:\*\* claude\\_code$/m);
        assert.match(md, /^- \*\*Model:\*\* claude\\-sonnet\\-4$/m);
        assert.match(md, /^- \*\*Confidence:\*\* 92%$/m);
        assert.match(md, /^- \*\*Via:\*\* direct$/m);
        assert.match(md, /^- \*\*Tier:\*\* agent$/m);
        assert.match(md, /^### Window at event #42 \(code\\\.edit, src\/auth\\\.py, 92%\)$/m);
        assert.match(md, /^\*\*#40 · Assistant\*\* · \\\.\\\.\\\.$/m);
        assert.match(md, /^\| `\.\.\.` #42 \| `\.\.\.` #7 \| 61% \| moved \| 1:1 \| no \|$/m);
    });
    it('renders an empty result', () => {
        const md = renderExplainMarkdown(EMPTY_RESULT);
        assert.match(md, /No agent sessions found for this span\./);
        assert.doesNotMatch(md, /## Lineage/);
    });
    it('keeps hostile text inert', () => {
        const md = renderExplainMarkdown(RICH_RESULT);
        assert.match(md, /## 1\. Add &lt;script&gt;alert\\\(1\\\)&lt;\/script&gt; guard/);
        // transcript text sits in a fenced block whose fence outruns the text's own backticks
        assert.match(md, /`````text\nok ```` fence\n`````/);
        assert.match(md, /```text\nPlease add a guard <script>alert\("pwn"\)<\/script>\n```/);
        assert.match(md, /\*\*#12 · Edit app\/x\\\.py:10–12\*\* · 2026\\-03\\-01 09:00:09 UTC \*\*◆ anchor\*\*/);
    });
});

describe('helpers', () => {
    it('escapeHtml', () => {
        assert.equal(escapeHtml(`<a href="x">'&'</a>`), '&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;');
        assert.equal(escapeHtml(undefined), '');
    });
    it('formatTimeSpan', () => {
        assert.equal(formatTimeSpan('2026-03-01T09:00:00Z', '2026-03-02T10:00:00Z'), '2026-03-01 09:00:00 UTC – 2026-03-02 10:00:00 UTC');
        assert.equal(formatTimeSpan('2026-03-01T09:00:00.123Z', null), '2026-03-01 09:00:00 UTC');
        assert.equal(formatTimeSpan('...', '...'), '...');
    });
    it('codeBlock fences', () => {
        assert.equal(codeBlock('a'), '```text\na\n```');
        assert.equal(codeBlock('``` x'), '````text\n``` x\n````');
    });
});

describe('tape view', () => {
    const view = {
        tape_id: 't1',
        meta: { harness: 'claude_code', label: 'Fix <it>', model: 'm' },
        events: [4, 5, 6].map((offset) => ({ offset, k: 'msg.out', text: `event ${offset}` })),
        total: 20,
    };
    it('renders events, the anchor and navigation', () => {
        const html = renderViewHtml(view, { nonce: 'n', cspSource: 's', tapeId: 't1', at: 5, before: 1, after: 1 });
        assert.match(html, /<h1>Fix &lt;it&gt;<\/h1>/);
        assert.match(html, /<div class="ev anchor" data-offset="5">/);
        assert.match(html, /data-action="step" data-at="2">◀ Earlier/);
        assert.match(html, /data-action="step" data-at="8">Later ▶/);
    });
    it('reads engram-lsp\'s top-level view shape and offers continuations', () => {
        const real = {
            tape_id: 'abc', harness: 'codex', session: 's', tier: 'agent', label: 'Do it', model: 'gpt', live: false,
            n_events: 30, at: 0, range: [0, 2], events: [0, 1, 2].map((offset) => ({ offset, k: 'msg.in', text: `e${offset}` })),
            previous_tape: null, next_tape: 'def',
        };
        const html = renderViewHtml(real, { nonce: 'n', cspSource: 's', tapeId: 'abc', at: 0, before: 5, after: 5 });
        assert.match(textOf(html), /Do it .* Harness codex Model gpt Tier agent Session s Events 30/);
        assert.match(html, /data-action="step" data-at="0" disabled>◀ Earlier/);
        assert.match(html, /data-action="step" data-at="11">Later ▶/);
        assert.match(html, /data-action="openTape" data-tape-id="def" data-at="0">Continued by a later tape/);
        assert.doesNotMatch(html, /Continues an earlier tape/);
    });
    it('disables stepping past either end', () => {
        assert.deepEqual(viewNeighbours({ events: [{ offset: 0, k: 'meta' }, { offset: 1, k: 'msg.in' }], total: 2 }, 0, 3, 3), {
            earlier: undefined,
            later: undefined,
        });
    });
});

describe('status and search', () => {
    it('summarizeStatus accepts common shapes', () => {
        assert.deepEqual(summarizeStatus({ sessions: 12, live_sessions: [{}, {}] }), { sessions: 12, live: 2 });
        assert.deepEqual(summarizeStatus({ counts: { tapes: 3 } }), { sessions: 3, live: undefined });
        assert.deepEqual(summarizeStatus(null), {});
        assert.deepEqual(summarizeStatus({ counts: { tapes: 9, live_sessions: 1 }, live_sessions: [{ tape_id: 'x' }] }), { sessions: 9, live: 1 });
    });
    it('renderStatusMarkdown', () => {
        const md = renderStatusMarkdown({ sessions: 2, embedding: { device: 'cpu' } }, [['Server command', 'engram-lsp']]);
        assert.match(md, /\*\*2 sessions indexed\*\*/);
        assert.match(md, /- \*\*embedding\*\*\n {2}- \*\*device:\*\* `cpu`/);
        assert.match(md, /- \*\*Server command:\*\* `engram-lsp`/);
        assert.match(renderStatusMarkdown({ live_sessions: [], index_path: 'a`b' }), /- \*\*live\\_sessions:\*\* none\n- \*\*index\\_path:\*\* `a'b`/);
    });
    it('searchHits', () => {
        const hits = searchHits({ results: [{ tape_id: 'abc', offset: 3, label: 'L', harness: 'codex', score: 0.5, text: 'hello\n world' }, { nope: 1 }] });
        assert.deepEqual(hits, [{ tapeId: 'abc', offset: 3, title: 'L', description: 'codex · #3 · score 0.50', detail: 'hello world' }]);
        assert.deepEqual(searchHits([{ tapeId: 'x' }]).map((h) => h.offset), [0]);
        // engram-lsp's shape: sessions with signals and windows
        const real = searchHits({ query: 'q', semantic: false, results: [{ tape_id: 't', harness: 'claude_code', signals: { keyword: 0.75, semantic: null },
            windows: [{ anchor: 4, events: [{ offset: 3, k: 'msg.in', text: 'no' }, { offset: 4, k: 'msg.out', text: 'the  answer' }] }] }] });
        assert.deepEqual(real, [{ tapeId: 't', offset: 4, title: 'Tape t', description: 'claude_code · #4 · score 0.75', detail: 'the answer' }]);
        assert.deepEqual(searchHits('garbage'), []);
    });
});

describe('tool calls', () => {
    it('shows arguments readably, multi-line strings as they are', async () => {
        const { toolArgsText } = await import('../../src/render');
        assert.equal(toolArgsText({ file_path: '/x.py', content: 'a\nb\n', n: 2 }), 'file_path: /x.py\ncontent:\na\nb\nn: 2');
        assert.equal(toolArgsText('raw'), 'raw');
        assert.equal(toolArgsText(undefined), '');
    });
});

describe('highlighting', () => {
    it('marks the tool call behind the anchor edit: same call_id, else the nearest one naming the file', async () => {
        const { relatedOffsets } = await import('../../src/render');
        const evs = [
            { offset: 1, k: 'tool.call', call_id: 'a', args: { file_path: '/r/x.py', content: '...' } },
            { offset: 2, k: 'tool.call', call_id: 'b', args: { file_path: '/r/y.js' } },
            { offset: 3, k: 'tool.result', call_id: 'a' },
            { offset: 4, k: 'code.edit', call_id: 'a', file: '/r/x.py' },
        ];
        assert.deepEqual([...relatedOffsets(evs, 4)], [1]);
        const noIds = evs.map(({ call_id: _c, ...e }) => e);
        assert.deepEqual([...relatedOffsets(noIds, 4)], [1]);
        assert.deepEqual([...relatedOffsets(noIds.filter((e) => e.offset !== 1), 4)], [], 'no guess when the call is outside the window');
        assert.deepEqual([...relatedOffsets(evs, 99)], []);
        const html = renderExplainHtml({ sessions: [{ tape_id: 't', windows: [{ anchor: 4, events: evs }] }] }, OPTS);
        assert.match(html, /<div class="ev edit" data-offset="1">/);
        assert.match(html, /<div class="ev" data-offset="2">/);
        assert.match(html, /<div class="ev anchor" data-offset="4">/);
    });
});

describe('windows without events', () => {
    it('tells a session listed without its transcript from an empty window', () => {
        const html = renderExplainHtml({ sessions: [
            { tape_id: 'a', windows: [{ anchor: 4, kind: 'code.read' }] },
            { tape_id: 'b', windows: [{ anchor: 5, kind: 'code.read', events: [] }] },
        ] }, OPTS);
        const text = textOf(html);
        assert.match(text, /event #4 · code\.read Transcript not included for this session: Open tape shows it\./);
        assert.match(text, /event #5 · code\.read No events in this window\./);
    });
});

describe('long output', () => {
    it('collapses long tool output that is not the anchor, and the tape view scrolls to its anchor', async () => {
        const { renderEventHtml } = await import('../../src/render');
        const stdout = Array.from({ length: 40 }, (_, i) => `line ${i}`).join('\n');
        assert.match(renderEventHtml({ offset: 1, k: 'tool.result', stdout }, 5), /<details><summary>40 lines<\/summary><pre class="code">line 0/);
        assert.doesNotMatch(renderEventHtml({ offset: 5, k: 'tool.result', stdout }, 5), /<details>/);
        assert.doesNotMatch(renderEventHtml({ offset: 1, k: 'msg.out', text: stdout }, 5), /<details>/);
        const html = renderViewHtml({ events: [{ offset: 0, k: 'msg.in', text: 'x' }] }, { nonce: 'n', cspSource: 's', tapeId: 't', at: 0, before: 1, after: 1 });
        assert.match(html, /<body data-scroll-to-anchor="1">/);
        assert.match(renderExplainHtml(DESIGN_EXAMPLE, OPTS), /<body>/);
    });
});
