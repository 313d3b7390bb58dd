import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FEEDBACK, renderExplainBody } from '../../src/render';
import { isReviewResult, isStatsResult, renderReviewBody, renderStatsMarkdown, reviewSummary, ReviewResult } from '../../src/workflowRender';

const REVIEW: ReviewResult = {
    range: 'main..HEAD',
    commits: [
        { sha: 'a'.repeat(40), subject: 'Add <b>hello</b>', author: 'Dev', t: '2026-01-05T09:00:00Z', added_lines: 10, agent_lines: 8,
          sessions: [{ session: 's1', tape_id: 't1', harness: 'claude_code', label: 'create hello.py', lines: 8 }] },
        { sha: 'b'.repeat(40), subject: 'Typed by hand', added_lines: 2, agent_lines: 0, sessions: [] },
    ],
    sessions: [{ session: 's1', tape_id: 't1', harness: 'claude_code', model: 'm', label: 'create hello.py', lines: 8 }],
    added_lines: 12,
    agent_lines: 8,
    agent_share: 0.6667,
    no_session_commits: ['b'.repeat(40)],
    dead_ends: [{ tape_id: 't1', session: 's1', file: 'x.py', lines_written: 4, lines_surviving: 1 }],
};

describe('review and stats rendering', () => {
    it('summarizes a review', () => {
        assert.equal(reviewSummary(REVIEW), '67% of 12 added lines written by agent sessions (8), 4 by hand; 2 commits, 1 with no session');
        assert.ok(isReviewResult(REVIEW));
        assert.ok(!isReviewResult({ commits: [] }));
    });

    it('renders commits, sessions, hand-written commits and dead ends, escaped', () => {
        const html = renderReviewBody(REVIEW);
        assert.match(html, /<code>aaaaaaa<\/code> Add &lt;b&gt;hello&lt;\/b&gt;/);
        assert.ok(!html.includes('<b>hello</b>'));
        assert.match(html, /No session: written by hand/);
        assert.match(html, /x\.py: 1 of 4 lines written by s1 survive/);
        assert.match(html, /80% agent/);
    });

    it('renders stats as a Markdown table with unknown costs said so', () => {
        const md = renderStatsMarkdown({
            by: 'model', scope: 'all',
            rows: [{ key: 'claude-x', sessions: 2, input_tokens: 1200, output_tokens: 30, cost_usd: null, lines_at_head: 5 }],
            total: { sessions: 2, input_tokens: 1200, output_tokens: 30, cost_usd: null, lines_at_head: 5 },
            head: { files: 3, lines: 50, agent_lines: 5, agent_share: 0.1 },
        });
        assert.match(md, /^# Engram stats by model/);
        assert.match(md, /\| claude\\-x \| 2 \| 1,200 \| 30 \| 0 \| 0 \| unknown \| 5 \|/);
        assert.match(md, /Agent-written lines at HEAD: 5 of 50 \(10%\) in 3 files\./);
        assert.ok(isStatsResult({ by: 'x', rows: [] }));
    });

    it('puts feedback buttons on every session of the explain view', () => {
        const html = renderExplainBody(
            { span: { file: 'a.py', start: 1, end: 2 }, sessions: [{ tape_id: 'tape1', harness: 'claude_code', confidence: 1 }] } as never,
            { nonce: 'n', cspSource: 'c', before: 3, after: 3, expandStep: 5 },
        );
        for (const [verdict, label] of FEEDBACK) {
            assert.ok(html.includes(`data-action="feedback" data-tape-id="tape1" data-verdict="${verdict}">${label}</button>`), verdict);
        }
    });
});
