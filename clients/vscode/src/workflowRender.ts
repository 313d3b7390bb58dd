/**
 * Pure rendering of engram/review (HTML for the "Engram: Review" webview) and engram/stats
 * (Markdown). No VS Code import: the unit tests load this module. All text from a result is escaped.
 */
import { escapeHtml, escapeMarkdown, formatTime, page, PageOptions, shortId } from './render';

export interface ReviewSession {
    session?: string | null;
    tape_id?: string | null;
    harness?: string | null;
    model?: string | null;
    label?: string | null;
    lines?: number;
    commits?: string[];
}

export interface ReviewCommit {
    sha: string;
    subject?: string;
    author?: string;
    t?: string;
    added_lines?: number;
    agent_lines?: number;
    sessions?: ReviewSession[];
}

export interface ReviewResult {
    range: string;
    commits: ReviewCommit[];
    files?: Array<{ path: string; added_lines?: number; agent_lines?: number; agent_share?: number | null }>;
    sessions?: ReviewSession[];
    added_lines?: number;
    agent_lines?: number;
    agent_share?: number | null;
    no_session_commits?: string[];
    dead_ends?: Array<{ tape_id?: string; session?: string; file?: string; lines_written?: number; lines_surviving?: number }>;
    warnings?: string[];
}

/** Ranges with at most this many commits show each commit's sessions unfolded. */
export const OPEN_COMMITS = 20;

export function isReviewResult(value: unknown): value is ReviewResult {
    const v = value as ReviewResult;
    return typeof v === 'object' && v !== null && typeof v.range === 'string' && Array.isArray(v.commits);
}

function pct(x: number | null | undefined): string {
    return typeof x === 'number' && Number.isFinite(x) ? `${Math.round(x * 100)}%` : '–';
}

function sessionName(s: ReviewSession): string {
    return s.label || s.session || s.tape_id || '?';
}

export function reviewSummary(r: ReviewResult): string {
    const added = r.added_lines ?? 0;
    const agent = r.agent_lines ?? 0;
    const none = r.no_session_commits?.length ?? 0;
    return `${pct(r.agent_share)} of ${added} added lines written by agent sessions (${agent}), ${added - agent} by hand; ` +
        `${r.commits.length} commit${r.commits.length === 1 ? '' : 's'}, ${none} with no session`;
}

export function renderReviewBody(r: ReviewResult): string {
    const warnings = (r.warnings ?? []).map((w) => `<p class="warning">⚠ ${escapeHtml(w)}</p>`).join('\n');
    const sessions = r.sessions?.length
        ? `<h2>Sessions</h2>
<table class="lineage"><thead><tr><th>Session</th><th>Harness · model</th><th>Lines</th><th>Request</th></tr></thead><tbody>
${r.sessions
        .map((s) => `<tr><td><code>${escapeHtml(shortId(s.session || s.tape_id))}</code></td><td>${escapeHtml([s.harness, s.model].filter(Boolean).join(' · '))}</td>` +
            `<td>${escapeHtml(s.lines ?? 0)}</td><td>${escapeHtml(s.label ?? '')}</td></tr>`)
        .join('\n')}
</tbody></table>`
        : '';
    const open = r.commits.length <= OPEN_COMMITS ? ' open' : ''; // a long range starts collapsed
    const commits = r.commits
        .map((c) => {
            const who = c.sessions?.length
                ? `<ul>${c.sessions.map((s) => `<li>${escapeHtml(sessionName(s))} <span class="muted">· ${escapeHtml(s.harness ?? '')} · ${escapeHtml(s.lines ?? 0)} lines</span></li>`).join('')}</ul>`
                : '<p class="muted">No session: written by hand (as far as the index knows).</p>';
            const share = c.added_lines ? pct((c.agent_lines ?? 0) / c.added_lines) : '–';
            return `<details class="commit"${open} data-sha="${escapeHtml(c.sha)}"><summary><code>${escapeHtml(c.sha.slice(0, 7))}</code> ${escapeHtml(c.subject ?? '')} ` +
                `<span class="muted">· ${escapeHtml(c.author ?? '')} · ${escapeHtml(formatTime(c.t))} · ${escapeHtml(share)} agent</span></summary>${who}</details>`;
        })
        .join('\n');
    const dead = r.dead_ends?.length
        ? `<h2>Dead ends</h2><ul>${r.dead_ends.map((d) => `<li>${escapeHtml(d.file ?? '?')}: ${escapeHtml(d.lines_surviving ?? 0)} of ${escapeHtml(d.lines_written ?? 0)} lines written by ${escapeHtml(shortId(d.session || d.tape_id))} survive</li>`).join('')}</ul>`
        : '';
    return `<h1>Engram: review ${escapeHtml(r.range)}</h1>
<div class="summary">${escapeHtml(reviewSummary(r))}</div>
${warnings}
${sessions}
<h2>Commits</h2>
${commits || '<p class="muted">No commits in this range.</p>'}
${dead}`;
}

export function renderReviewHtml(r: ReviewResult, opts: PageOptions): string {
    return page(`Engram: review ${r.range}`, renderReviewBody(r), opts);
}

export interface StatsRow {
    key: string;
    sessions?: number;
    input_tokens?: number;
    output_tokens?: number;
    cache_read_tokens?: number;
    cache_write_tokens?: number;
    cost_usd?: number | null;
    lines_at_head?: number;
}

export interface StatsResult {
    by: string;
    scope?: string;
    rows: StatsRow[];
    total: StatsRow | Omit<StatsRow, 'key'>;
    head?: { files?: number; lines?: number; agent_lines?: number; agent_share?: number | null };
    warnings?: string[];
}

export function isStatsResult(value: unknown): value is StatsResult {
    const v = value as StatsResult;
    return typeof v === 'object' && v !== null && typeof v.by === 'string' && Array.isArray(v.rows);
}

function num(n: number | undefined | null): string {
    return typeof n === 'number' ? n.toLocaleString('en-US') : '0';
}

function usd(n: number | undefined | null): string {
    return typeof n === 'number' ? `$${n.toFixed(2)}` : 'unknown';
}

export function renderStatsMarkdown(s: StatsResult): string {
    const lines = [`# Engram stats by ${escapeMarkdown(s.by)}`, ''];
    if (s.scope) {
        lines.push(`Scope: ${s.scope === 'all' ? 'every indexed session' : `sessions in ${escapeMarkdown(s.scope)}`}`, '');
    }
    for (const w of s.warnings ?? []) {
        lines.push(`> ⚠ ${escapeMarkdown(w)}`, '');
    }
    lines.push(`| ${escapeMarkdown(s.by)} | sessions | input | output | cache read | cache write | cost | lines at HEAD |`, '|---|---:|---:|---:|---:|---:|---:|---:|');
    const row = (name: string, r: Omit<StatsRow, 'key'>) =>
        `| ${name} | ${num(r.sessions)} | ${num(r.input_tokens)} | ${num(r.output_tokens)} | ${num(r.cache_read_tokens)} | ${num(r.cache_write_tokens)} | ${usd(r.cost_usd)} | ${num(r.lines_at_head)} |`;
    for (const r of s.rows) {
        lines.push(row(escapeMarkdown(r.key), r));
    }
    lines.push(row('**total**', s.total));
    if (s.head) {
        lines.push('', `Agent-written lines at HEAD: ${num(s.head.agent_lines)} of ${num(s.head.lines)} (${pct(s.head.agent_share)}) in ${num(s.head.files)} files.`);
    }
    return `${lines.join('\n')}\n`;
}
