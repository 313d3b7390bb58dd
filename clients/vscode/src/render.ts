/**
 * Pure rendering of engram-lsp results to HTML (the webview) and Markdown. No VS Code import: the
 * unit tests load this module directly. Every piece of text from a result is escaped — transcripts
 * are untrusted input (they contain whatever agents and tools printed).
 */
import type { ExplainResult, ExplainSession, ExplainWindow, LineageEdge, TapeEvent, ViewResult } from './types';

/** Longest text shown for one event before it is cut (the full text stays in the tape). */
export const MAX_TEXT = 6000;
/** Tool output and file reads longer than this start collapsed (unless they are the anchor). */
export const COLLAPSE_LINES = 12;

export interface PageOptions {
    /** Nonce of the one inline script and style element. */
    nonce: string;
    /** `webview.cspSource`. */
    cspSource: string;
}

export interface ExplainRenderOptions extends PageOptions {
    /** Window size the result was asked with (shown, and used by "Expand window"). */
    before: number;
    after: number;
    expandStep: number;
}

export interface ViewRenderOptions extends PageOptions {
    tapeId: string;
    at: number;
    before: number;
    after: number;
}

// ---------------------------------------------------------------------------------------------------
// Small helpers

export function escapeHtml(value: unknown): string {
    return String(value ?? '')
        .replace(/&/g, '&amp;')
        .replace(/</g, '&lt;')
        .replace(/>/g, '&gt;')
        .replace(/"/g, '&quot;')
        .replace(/'/g, '&#39;');
}

/** `2026-02-15T17:30:00Z` → `2026-02-15 17:30:00 UTC`; anything else is returned as given. */
export function formatTime(iso: string | null | undefined): string {
    if (!iso) {
        return '';
    }
    const m = /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}(?::\d{2})?)(?:\.\d+)?(Z|[+-]00:?00)?$/.exec(iso);
    if (!m) {
        return iso;
    }
    return `${m[1]} ${m[2]}${m[3] ? ' UTC' : ''}`;
}

/** A session's time span: `2026-02-15 17:30:00 UTC – 18:02:11` (the date once when it is the same). */
export function formatTimeSpan(first: string | null | undefined, last: string | null | undefined): string {
    const a = formatTime(first);
    const b = formatTime(last);
    if (!a) {
        return b;
    }
    if (!b || a === b) {
        return a;
    }
    const [dateA] = a.split(' ');
    const [dateB, timeB] = b.split(' ');
    return dateA === dateB && timeB ? `${a} – ${timeB}` : `${a} – ${b}`;
}

export function formatConfidence(value: number | null | undefined): string {
    return typeof value === 'number' && Number.isFinite(value) ? `${Math.round(value * 100)}%` : '–';
}

export function shortId(id: string | null | undefined, length = 12): string {
    if (!id) {
        return '';
    }
    return id.length > length ? `${id.slice(0, length)}…` : id;
}

function formatRange(range: unknown): string {
    if (Array.isArray(range) && range.length === 2) {
        return range[0] === range[1] ? `${range[0]}` : `${range[0]}–${range[1]}`;
    }
    return '';
}

function fileRange(file: unknown, range: unknown): string {
    const r = formatRange(range);
    return `${file ?? ''}${r ? `:${r}` : ''}`;
}

function clip(text: string): string {
    if (text.length <= MAX_TEXT) {
        return text;
    }
    return `${text.slice(0, MAX_TEXT)}\n… (${text.length - MAX_TEXT} more characters in the tape)`;
}

function json(value: unknown): string {
    if (typeof value === 'string') {
        return value;
    }
    try {
        return JSON.stringify(value, null, 2) ?? '';
    } catch {
        return String(value);
    }
}

export function spanTitle(result: ExplainResult): string {
    const span = result.span ?? {};
    if (!span.file) {
        return 'Engram: Explain';
    }
    const range = typeof span.start === 'number' && typeof span.end === 'number' ? formatRange([span.start, span.end]) : '';
    return `${span.file}${range ? `:${range}` : ''}`;
}

export function summaryLine(result: ExplainResult): string {
    const parts: string[] = [];
    const requested = result.span?.requested;
    if (Array.isArray(requested) && requested.length === 2) {
        parts.push(`requested lines ${formatRange(requested)}`);
    }
    const n = result.sessions.length;
    parts.push(`${n} session${n === 1 ? '' : 's'}`);
    const edges = result.lineage?.length ?? 0;
    if (edges > 0) {
        parts.push(`${edges} lineage edge${edges === 1 ? '' : 's'}`);
    }
    const stats = result.stats;
    if (stats && typeof stats.matched === 'number' && typeof stats.fingerprints === 'number') {
        parts.push(`${stats.matched} of ${stats.fingerprints} fingerprints matched`);
    }
    if (stats && typeof stats.elapsed_ms === 'number') {
        parts.push(`${stats.elapsed_ms} ms`);
    }
    return parts.join(' · ');
}

/** A readable name for an event kind. */
export function eventLabel(event: TapeEvent): string {
    switch (event.k) {
        case 'meta':
            return 'Session start';
        case 'msg.in':
            return 'User';
        case 'msg.out':
            return 'Assistant';
        case 'tool.call':
            return `Tool call${event.tool ? ` · ${event.tool}` : ''}`;
        case 'tool.result': {
            const exit = typeof event.exit === 'number' ? ` (exit ${event.exit})` : '';
            return `Tool result${event.tool ? ` · ${event.tool}` : ''}${exit}`;
        }
        case 'code.read':
            return `Read ${fileRange(event.file, event.range)}`;
        case 'code.edit':
            return `Edit ${fileRange(event.file, event.after_range ?? event.before_range)}`;
        case 'span.link':
            return `Link ${fileRange(event.from_file, event.from_range)} → ${fileRange(event.to_file, event.to_range)}`;
        default:
            return event.k;
    }
}

const EVENT_BASE_KEYS = new Set(['offset', 't', 'k']);

/** The plain-text body of an event (what the transcript shows under its label). */
export function eventText(event: TapeEvent): string {
    switch (event.k) {
        case 'msg.in':
        case 'msg.out':
        case 'code.read':
            return event.text ?? '';
        case 'meta':
            return [event.label, event.harness, event.model].filter((v) => typeof v === 'string' && v).join(' · ');
        case 'tool.call':
            return toolArgsText(event.args);
        case 'tool.result':
            return [event.stdout ?? '', event.stderr ? `[stderr]\n${event.stderr}` : ''].filter(Boolean).join('\n');
        case 'span.link':
            return event.note ?? '';
        case 'code.edit':
            return editDiffLines(event)
                .map(([sign, line]) => `${sign} ${line}`)
                .join('\n');
        default: {
            const rest: Record<string, unknown> = {};
            for (const [key, value] of Object.entries(event)) {
                if (!EVENT_BASE_KEYS.has(key)) {
                    rest[key] = value;
                }
            }
            return json(rest);
        }
    }
}

/** Tool arguments for reading: one `key: value` per argument, multi-line strings (file contents,
 * patches, commands) shown as they are instead of JSON-escaped. */
export function toolArgsText(args: unknown): string {
    if (typeof args !== 'object' || args === null || Array.isArray(args)) {
        return args === undefined ? '' : json(args);
    }
    return Object.entries(args as Record<string, unknown>)
        .map(([key, value]) => {
            if (typeof value === 'string') {
                return value.includes('\n') ? `${key}:\n${value.replace(/\n$/, '')}` : `${key}: ${value}`;
            }
            return `${key}: ${JSON.stringify(value)}`;
        })
        .join('\n');
}

/** A code.edit as `-`/`+` lines (before text removed, after text added). */
export function editDiffLines(event: TapeEvent): Array<['-' | '+', string]> {
    const out: Array<['-' | '+', string]> = [];
    const before = event.before_text ?? '';
    const after = event.after_text ?? '';
    if (before) {
        for (const line of before.replace(/\n$/, '').split('\n')) {
            out.push(['-', line]);
        }
    }
    if (after) {
        for (const line of after.replace(/\n$/, '').split('\n')) {
            out.push(['+', line]);
        }
    }
    return out;
}

/** Offsets of the events to highlight with the anchor: the tool call behind the anchor edit — the
 * one with the same `call_id`, else the nearest earlier tool call whose arguments name the edited
 * file. Nothing when neither is in the window (a guess would point at the wrong call). */
export function relatedOffsets(events: TapeEvent[], anchor: number | undefined): Set<number> {
    const out = new Set<number>();
    const anchorEvent = events.find((e) => e.offset === anchor);
    if (!anchorEvent || anchorEvent.k === 'tool.call') {
        return out;
    }
    const calls = events.filter((e) => e.k === 'tool.call' && e.offset !== anchor);
    const callId = typeof anchorEvent.call_id === 'string' && anchorEvent.call_id ? anchorEvent.call_id : undefined;
    if (callId) {
        for (const e of calls) {
            if (e.call_id === callId) {
                out.add(e.offset);
            }
        }
        return out;
    }
    const file = typeof anchorEvent.file === 'string' && anchorEvent.file ? anchorEvent.file : undefined;
    if (anchorEvent.k === 'code.edit' && file) {
        const naming = calls.filter((e) => e.offset < anchorEvent.offset && json(e.args ?? '').includes(file));
        if (naming.length) {
            out.add(naming[naming.length - 1].offset);
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------------
// HTML

const STYLE = `
:root { color-scheme: light dark; }
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground);
  background: var(--vscode-editor-background); padding: 0 16px 24px; line-height: 1.45; }
h1 { font-size: 1.3em; margin: 16px 0 4px; font-weight: 600; word-break: break-all; }
h2 { font-size: 1.1em; margin: 20px 0 6px; font-weight: 600; }
h3 { font-size: 1em; margin: 12px 0 4px; font-weight: 600; }
.summary, .muted { color: var(--vscode-descriptionForeground); }
.toolbar { display: flex; gap: 8px; flex-wrap: wrap; margin: 10px 0 14px; }
button { font-family: inherit; font-size: inherit; color: var(--vscode-button-foreground); background: var(--vscode-button-background);
  border: 1px solid var(--vscode-button-border, transparent); border-radius: 2px; padding: 4px 10px; cursor: pointer; }
button:hover { background: var(--vscode-button-hoverBackground); }
button.secondary { color: var(--vscode-button-secondaryForeground); background: var(--vscode-button-secondaryBackground); }
button.secondary:hover { background: var(--vscode-button-secondaryHoverBackground); }
button:disabled { opacity: 0.5; cursor: default; }
button:focus-visible { outline: 1px solid var(--vscode-focusBorder); outline-offset: 2px; }
.session { border: 1px solid var(--vscode-panel-border, var(--vscode-widget-border, rgba(128,128,128,.35))); border-radius: 4px;
  padding: 8px 12px 10px; margin: 12px 0; background: var(--vscode-sideBar-background, transparent); }
.session-head { display: flex; justify-content: space-between; gap: 12px; align-items: baseline; flex-wrap: wrap; }
.feedback button { margin-left: 4px; }
.session-title { font-weight: 600; font-size: 1.05em; }
.facts { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 4px 0 6px; }
.fact b { font-weight: 600; color: var(--vscode-descriptionForeground); }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: .85em; color: var(--vscode-badge-foreground);
  background: var(--vscode-badge-background); }
.window { margin: 8px 0 0; }
.window-head { color: var(--vscode-descriptionForeground); margin: 6px 0 4px; }
.ev { border-left: 3px solid transparent; padding: 2px 0 2px 8px; margin: 4px 0; }
.ev.edit { border-left-color: var(--vscode-textLink-foreground); }
.ev.anchor { border-left-color: var(--vscode-editorWarning-foreground, var(--vscode-textLink-activeForeground));
  background: var(--vscode-editor-findMatchHighlightBackground, rgba(234,92,0,.2)); }
.ev-head { display: flex; gap: 10px; align-items: baseline; flex-wrap: wrap; }
.ev-kind { font-weight: 600; }
.ev-kind.k-msg-in { color: var(--vscode-charts-blue, var(--vscode-textLink-foreground)); }
.ev-kind.k-msg-out { color: var(--vscode-charts-purple, var(--vscode-foreground)); }
.ev-kind.k-code-edit, .ev-kind.k-tool-call { color: var(--vscode-charts-orange, var(--vscode-foreground)); }
.ev-meta { color: var(--vscode-descriptionForeground); font-size: .9em; }
.anchor-mark { font-size: .85em; font-weight: 600; color: var(--vscode-editorWarning-foreground, inherit); }
pre { font-family: var(--vscode-editor-font-family); font-size: var(--vscode-editor-font-size); white-space: pre-wrap;
  word-break: break-word; margin: 2px 0; padding: 6px 8px; border-radius: 3px;
  background: var(--vscode-textCodeBlock-background, rgba(128,128,128,.12)); max-height: 28em; overflow: auto; }
pre.prose { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); background: transparent; padding: 0 0 2px; }
.del { color: var(--vscode-gitDecoration-deletedResourceForeground, #c74e39); }
.add { color: var(--vscode-gitDecoration-addedResourceForeground, #587c0c); }
table { border-collapse: collapse; margin: 6px 0; }
th, td { text-align: left; padding: 3px 10px 3px 0; border-bottom: 1px solid var(--vscode-panel-border, rgba(128,128,128,.35)); }
th { font-weight: 600; color: var(--vscode-descriptionForeground); }
code { font-family: var(--vscode-editor-font-family); }
.empty { margin: 24px 0; padding: 12px 14px; border: 1px dashed var(--vscode-panel-border, rgba(128,128,128,.5)); border-radius: 4px; }
summary { cursor: pointer; color: var(--vscode-textLink-foreground); font-size: .9em; }
.warning { color: var(--vscode-editorWarning-foreground, inherit); }
`;

// One inline script, allowed by its nonce. Buttons carry `data-action` (and data-*) attributes; a
// click posts their dataset to the extension. Nothing from a result is ever put into the script.
const SCRIPT = `
const vscode = acquireVsCodeApi();
if (document.body.dataset.scrollToAnchor) {
  const anchor = document.querySelector('.ev.anchor');
  if (anchor) { anchor.scrollIntoView({ block: 'center' }); }
}
document.addEventListener('click', (event) => {
  const el = event.target instanceof Element ? event.target.closest('[data-action]') : null;
  if (!el || el.disabled) { return; }
  event.preventDefault();
  vscode.postMessage(Object.assign({}, el.dataset));
});
`;

export function contentSecurityPolicy(opts: PageOptions): string {
    return [
        "default-src 'none'",
        `img-src ${opts.cspSource} data:`,
        `style-src 'nonce-${opts.nonce}'`,
        `font-src ${opts.cspSource}`,
        `script-src 'nonce-${opts.nonce}'`,
    ].join('; ');
}

export function page(title: string, body: string, opts: PageOptions & { scrollToAnchor?: boolean }): string {
    const nonce = escapeHtml(opts.nonce);
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${contentSecurityPolicy(opts).replace(/[&"<>]/g, (c) => escapeHtml(c))}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>${escapeHtml(title)}</title>
<style nonce="${nonce}">${STYLE}</style>
</head>
<body${opts.scrollToAnchor ? ' data-scroll-to-anchor="1"' : ''}>
${body}
<script nonce="${nonce}">${SCRIPT}</script>
</body>
</html>
`;
}

function button(label: string, data: Record<string, string | number>, opts: { secondary?: boolean; disabled?: boolean; title?: string } = {}): string {
    const attrs = Object.entries(data)
        .map(([key, value]) => ` data-${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}="${escapeHtml(value)}"`)
        .join('');
    const cls = opts.secondary ? ' class="secondary"' : '';
    const title = opts.title ? ` title="${escapeHtml(opts.title)}"` : '';
    return `<button type="button"${cls}${title}${attrs}${opts.disabled ? ' disabled' : ''}>${escapeHtml(label)}</button>`;
}

function kindClass(k: string): string {
    return `k-${k.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`;
}

export function renderEventHtml(event: TapeEvent, anchor?: number, related = false): string {
    const classes = ['ev'];
    if (related) {
        classes.push('edit');
    }
    const isAnchor = anchor !== undefined && event.offset === anchor;
    if (isAnchor) {
        classes.push('anchor');
    }
    let body: string;
    if (event.k === 'code.edit') {
        const lines = editDiffLines(event);
        body = lines.length
            ? `<pre class="diff">${clip(lines.map(([sign, line]) => `${sign} ${line}`).join('\n'))
                  .split('\n')
                  .map((line) => `<span class="${line.startsWith('-') ? 'del' : line.startsWith('+') ? 'add' : ''}">${escapeHtml(line)}</span>`)
                  .join('\n')}</pre>`
            : '';
    } else {
        const text = eventText(event);
        const prose = event.k === 'msg.in' || event.k === 'msg.out' || event.k === 'meta' || event.k === 'span.link';
        body = text ? `<pre class="${prose ? 'prose' : 'code'}">${escapeHtml(clip(text))}</pre>` : '';
        const lines = text.split('\n').length;
        if (body && !isAnchor && (event.k === 'tool.result' || event.k === 'code.read') && lines > COLLAPSE_LINES) {
            body = `<details><summary>${lines} lines</summary>${body}</details>`;
        }
    }
    const time = formatTime(event.t);
    return `<div class="${classes.join(' ')}" data-offset="${escapeHtml(event.offset)}">
<div class="ev-head"><span class="ev-kind ${kindClass(event.k)}">${escapeHtml(eventLabel(event))}</span>` +
        `<span class="ev-meta">#${escapeHtml(event.offset)}${time ? ` · ${escapeHtml(time)}` : ''}</span>` +
        `${isAnchor ? '<span class="anchor-mark">◆ anchor</span>' : ''}</div>
${body}
</div>`;
}

function renderWindowHtml(window: ExplainWindow): string {
    const facts = [
        `event #${window.anchor}`,
        window.kind,
        window.file,
        typeof window.confidence === 'number' ? formatConfidence(window.confidence) : undefined,
    ].filter((v) => v !== undefined && v !== '');
    const related = relatedOffsets(window.events ?? [], window.anchor);
    const events = (window.events ?? []).map((e) => renderEventHtml(e, window.anchor, related.has(e.offset))).join('\n');
    return `<div class="window">
<div class="window-head">Transcript window at ${escapeHtml(facts.join(' · '))}</div>
${events || (window.events === undefined
        ? '<div class="muted">Transcript not included for this session: <em>Open tape</em> shows it.</div>'
        : '<div class="muted">No events in this window.</div>')}
</div>`;
}

function fact(name: string, value: string | undefined | null): string {
    return value ? `<span class="fact"><b>${escapeHtml(name)}</b> ${escapeHtml(value)}</span>` : '';
}

export function sessionTitle(session: ExplainSession): string {
    return session.label || (session.session ? `Session ${shortId(session.session)}` : `Tape ${shortId(session.tape_id)}`);
}

/** The feedback buttons on each session of the explain view: verdict, label, tooltip. */
export const FEEDBACK: Array<[string, string, string]> = [
    ['helpful', 'Helpful', 'This session explains this code (its confidence goes up by 0.08)'],
    ['not_relevant', 'Not relevant', 'This session has nothing to do with this code'],
    ['incorrect', 'Incorrect', 'Wrong answer for this span: rank this session last here (confidence −0.15)'],
];

function renderSessionHtml(session: ExplainSession, index: number): string {
    const firstAnchor = session.windows?.[0]?.anchor ?? 0;
    const facts = [
        fact('Harness', session.harness),
        fact('Model', session.model),
        fact('Time', formatTimeSpan(session.first_t, session.last_t)),
        fact('Confidence', formatConfidence(session.confidence)),
        fact('Via', session.via),
        fact('Tier', session.tier ?? undefined),
        fact('Touches', typeof session.touches === 'number' ? String(session.touches) : undefined),
        session.signals && typeof session.signals.semantic === 'number' ? fact('Semantic', formatConfidence(session.signals.semantic)) : '',
        fact('Tape', shortId(session.tape_id)),
        session.live ? '<span class="badge">live</span>' : '',
    ]
        .filter(Boolean)
        .join('');
    const windows = (session.windows ?? []).map(renderWindowHtml).join('\n');
    return `<section class="session" data-tape-id="${escapeHtml(session.tape_id)}">
<div class="session-head"><span class="session-title">${index + 1}. ${escapeHtml(sessionTitle(session))}</span>
${button('Open tape', { action: 'openTape', tapeId: session.tape_id, at: firstAnchor }, { secondary: true, title: 'Open this session in the tape viewer at the anchor event' })}
<span class="feedback">${FEEDBACK.map(([verdict, label, title]) => button(label, { action: 'feedback', tapeId: session.tape_id, verdict }, { secondary: true, title })).join('')}</span></div>
<div class="facts">${facts}</div>
${windows}
</section>`;
}

function edgeEnd(end: { tape_id: string; offset: number }): string {
    return `${escapeHtml(shortId(end.tape_id))} #${escapeHtml(end.offset)}`;
}

function renderLineageHtml(edges: LineageEdge[]): string {
    if (!edges.length) {
        return '';
    }
    const rows = edges
        .map(
            (e) =>
                `<tr><td>${edgeEnd(e.from)}</td><td>${edgeEnd(e.to)}</td><td>${escapeHtml(formatConfidence(e.confidence))}</td>` +
                `<td>${escapeHtml(e.location_delta ?? '')}</td><td>${escapeHtml(e.cardinality ?? '')}</td><td>${e.agent_link ? 'yes' : 'no'}</td></tr>`,
        )
        .join('\n');
    return `<h2>Lineage</h2>
<table class="lineage"><thead><tr><th>From</th><th>To</th><th>Confidence</th><th>Location</th><th>Cardinality</th><th>Agent link</th></tr></thead>
<tbody>
${rows}
</tbody></table>`;
}

function renderTombstonesHtml(result: ExplainResult): string {
    const stones = result.tombstones ?? [];
    if (!stones.length) {
        return '';
    }
    const items = stones
        .map((s) => `<li>${escapeHtml(fileRange(s.file, s.range))} deleted in ${escapeHtml(shortId(s.tape_id))} #${escapeHtml(s.offset ?? '')}${s.t ? ` · ${escapeHtml(formatTime(s.t))}` : ''}</li>`)
        .join('\n');
    return `<h2>Deleted earlier</h2>\n<ul class="tombstones">\n${items}\n</ul>`;
}

export function renderExplainBody(result: ExplainResult, opts: ExplainRenderOptions): string {
    const next = { before: opts.before + opts.expandStep, after: opts.after + opts.expandStep };
    const toolbar = `<div class="toolbar">
${button(`Expand window (${next.before} before, ${next.after} after)`, { action: 'expand' }, { disabled: result.sessions.length === 0 })}
${button('Open as Markdown', { action: 'markdown' }, { secondary: true })}
${button('Refresh', { action: 'refresh' }, { secondary: true })}
</div>`;
    const truncated: string[] = [];
    if (result.truncated?.fanout) {
        truncated.push('the lineage walk hit its fan-out limit');
    }
    if (result.truncated?.edges) {
        truncated.push('the lineage walk hit its edge limit');
    }
    const warn = truncated.length ? `<p class="warning">Partial answer: ${escapeHtml(truncated.join('; '))}.</p>` : '';
    const sessions = result.sessions.length
        ? result.sessions.map(renderSessionHtml).join('\n')
        : `<div class="empty"><b>No agent sessions found for this span.</b><br>
<span class="muted">Nothing in the indexed sessions matches this code above the minimum confidence. Check that the
harness logs are in Engram's sources (<code>.engram/config.yml</code>), run <em>Engram: Reindex</em>, or lower
<code>engram.minConfidence</code>.</span></div>`;
    return `<h1>${escapeHtml(spanTitle(result))}</h1>
<div class="summary">${escapeHtml(summaryLine(result))} · window ${escapeHtml(opts.before)} before, ${escapeHtml(opts.after)} after</div>
${toolbar}
${warn}
${sessions}
${renderLineageHtml(result.lineage ?? [])}
${renderTombstonesHtml(result)}`;
}

export function renderExplainHtml(result: ExplainResult, opts: ExplainRenderOptions): string {
    return page(`Engram: ${spanTitle(result)}`, renderExplainBody(result, opts), opts);
}

/** A page with just a heading and a message (loading, errors). */
export function renderMessageHtml(title: string, message: string, opts: PageOptions, actions: Array<[string, string]> = []): string {
    const buttons = actions.map(([label, action]) => button(label, { action }, { secondary: true })).join('\n');
    return page(title, `<h1>${escapeHtml(title)}</h1>\n<p>${escapeHtml(message)}</p>\n${buttons ? `<div class="toolbar">${buttons}</div>` : ''}`, opts);
}

/** Events of an `engram/view` result, whatever it calls them. */
export function viewEvents(view: ViewResult): TapeEvent[] {
    const candidates = [view.events, (view.window as { events?: unknown } | undefined)?.events];
    for (const c of candidates) {
        if (Array.isArray(c)) {
            return c as TapeEvent[];
        }
    }
    return [];
}

/** Total number of events in the tape when the view result says so. */
export function viewTotal(view: ViewResult): number | undefined {
    for (const key of ['total', 'count', 'n_events', 'events_total', 'length']) {
        const v = view[key];
        if (typeof v === 'number') {
            return v;
        }
    }
    return undefined;
}

/** Offsets for the "earlier"/"later" buttons of the tape view; undefined when there is nothing there. */
export function viewNeighbours(view: ViewResult, at: number, before: number, after: number): { earlier?: number; later?: number } {
    const events = viewEvents(view);
    const first = events.length ? Math.min(...events.map((e) => e.offset)) : at - before;
    const last = events.length ? Math.max(...events.map((e) => e.offset)) : at + after;
    const total = viewTotal(view);
    const step = before + after + 1;
    return {
        earlier: first > 0 ? Math.max(0, at - step) : undefined,
        later: total === undefined ? (events.length ? at + step : undefined) : last < total - 1 ? at + step : undefined,
    };
}

export function renderViewHtml(view: ViewResult, opts: ViewRenderOptions): string {
    // engram-lsp puts the tape's facts at the top level; accept a nested `meta` too.
    const meta = (typeof view.meta === 'object' && view.meta !== null ? view.meta : view) as Record<string, unknown>;
    const events = viewEvents(view);
    const related = relatedOffsets(events, opts.at);
    const nav = viewNeighbours(view, opts.at, opts.before, opts.after);
    const total = viewTotal(view);
    const str = (v: unknown) => (typeof v === 'string' && v ? v : undefined);
    const facts = [
        fact('Harness', str(meta.harness)),
        fact('Model', str(meta.model)),
        fact('Tier', str(meta.tier)),
        fact('Session', str(meta.session) && shortId(str(meta.session))),
        fact('Events', total !== undefined ? String(total) : undefined),
        meta.live === true ? '<span class="badge">live</span>' : '',
    ]
        .filter(Boolean)
        .join('');
    const title = str(meta.label) ?? `Tape ${shortId(opts.tapeId)}`;
    const previous = str(view.previous_tape);
    const next = str(view.next_tape);
    const toolbar = `<div class="toolbar">
${button('◀ Earlier', { action: 'step', at: nav.earlier ?? 0 }, { disabled: nav.earlier === undefined })}
${button('Later ▶', { action: 'step', at: nav.later ?? 0 }, { disabled: nav.later === undefined })}
${previous ? button('Continues an earlier tape', { action: 'openTape', tapeId: previous, at: 0 }, { secondary: true }) : ''}
${next ? button('Continued by a later tape', { action: 'openTape', tapeId: next, at: 0 }, { secondary: true }) : ''}
</div>`;
    const body = `<h1>${escapeHtml(title)}</h1>
<div class="summary">Tape ${escapeHtml(opts.tapeId)} · around event #${escapeHtml(opts.at)}</div>
<div class="facts">${facts}</div>
${toolbar}
${events.map((e) => renderEventHtml(e, opts.at, related.has(e.offset))).join('\n') || '<div class="empty">No events here.</div>'}`;
    return page(`Engram: ${title}`, body, { ...opts, scrollToAnchor: true });
}

// ---------------------------------------------------------------------------------------------------
// Markdown

/** Escape text for inline Markdown (no HTML passes through). */
export function escapeMarkdown(value: unknown): string {
    return String(value ?? '')
        .replace(/[\\`*_{}[\]()#+\-.!|~]/g, (c) => `\\${c}`)
        .replace(/&/g, '&amp;')
        .replace(/</g, '&lt;')
        .replace(/>/g, '&gt;')
        .replace(/\r?\n/g, ' ');
}

/** A fenced code block whose fence is longer than any backtick run inside the text. */
export function codeBlock(text: string, lang = 'text'): string {
    const longest = Math.max(0, ...Array.from(text.matchAll(/`+/g), (m) => m[0].length));
    const fence = '`'.repeat(Math.max(3, longest + 1));
    return `${fence}${lang}\n${text}\n${fence}`;
}

function eventMarkdown(event: TapeEvent, anchor: number | undefined): string {
    const time = formatTime(event.t);
    const mark = anchor !== undefined && event.offset === anchor ? ' **◆ anchor**' : '';
    const head = `**#${event.offset} · ${escapeMarkdown(eventLabel(event))}**${time ? ` · ${escapeMarkdown(time)}` : ''}${mark}`;
    const text = eventText(event);
    if (!text) {
        return head;
    }
    const lang = event.k === 'code.edit' ? 'diff' : 'text';
    return `${head}\n\n${codeBlock(clip(text), lang)}`;
}

export function renderExplainMarkdown(result: ExplainResult): string {
    const out: string[] = [`# Engram: ${escapeMarkdown(spanTitle(result))}`, '', `_${escapeMarkdown(summaryLine(result))}_`, ''];
    if (result.truncated?.fanout || result.truncated?.edges) {
        out.push('> Partial answer: the lineage walk hit its limits.', '');
    }
    if (!result.sessions.length) {
        out.push('No agent sessions found for this span.', '');
    }
    result.sessions.forEach((s, i) => {
        out.push(`## ${i + 1}. ${escapeMarkdown(sessionTitle(s))}`, '');
        const facts: Array<[string, string | undefined | null]> = [
            ['Harness', s.harness],
            ['Model', s.model],
            ['Time', formatTimeSpan(s.first_t, s.last_t)],
            ['Confidence', formatConfidence(s.confidence)],
            ['Via', s.via],
            ['Tier', s.tier],
            ['Touches', typeof s.touches === 'number' ? String(s.touches) : undefined],
            ['Tape', s.tape_id],
            ['Session', s.session],
        ];
        for (const [name, value] of facts) {
            if (value) {
                out.push(`- **${name}:** ${name === 'Tape' || name === 'Session' ? `\`${value.replace(/`/g, '')}\`` : escapeMarkdown(value)}`);
            }
        }
        out.push('');
        for (const w of s.windows ?? []) {
            const facts2 = [w.kind, w.file, typeof w.confidence === 'number' ? formatConfidence(w.confidence) : undefined].filter(Boolean);
            out.push(`### Window at event #${w.anchor}${facts2.length ? ` (${escapeMarkdown(facts2.join(', '))})` : ''}`, '');
            for (const e of w.events ?? []) {
                out.push(eventMarkdown(e, w.anchor), '');
            }
        }
    });
    const edges = result.lineage ?? [];
    if (edges.length) {
        out.push('## Lineage', '', '| From | To | Confidence | Location | Cardinality | Agent link |', '|---|---|---|---|---|---|');
        for (const e of edges) {
            out.push(
                `| \`${shortId(e.from.tape_id)}\` #${e.from.offset} | \`${shortId(e.to.tape_id)}\` #${e.to.offset} | ${formatConfidence(e.confidence)} | ` +
                    `${escapeMarkdown(e.location_delta ?? '')} | ${escapeMarkdown(e.cardinality ?? '')} | ${e.agent_link ? 'yes' : 'no'} |`,
            );
        }
        out.push('');
    }
    const stones = result.tombstones ?? [];
    if (stones.length) {
        out.push('## Deleted earlier', '');
        for (const s of stones) {
            out.push(`- ${escapeMarkdown(fileRange(s.file, s.range))} in \`${shortId(s.tape_id)}\` #${s.offset ?? ''}`);
        }
        out.push('');
    }
    return out.join('\n');
}

// ---------------------------------------------------------------------------------------------------
// engram/status

export interface StatusSummary {
    sessions?: number;
    live?: number;
}

function countOf(value: unknown): number | undefined {
    if (typeof value === 'number' && Number.isFinite(value)) {
        return value;
    }
    if (Array.isArray(value)) {
        return value.length;
    }
    return undefined;
}

/** Session count and live sessions from an `engram/status` result (its exact keys are the server's;
 * the common spellings are accepted). */
export function summarizeStatus(status: unknown): StatusSummary {
    if (typeof status !== 'object' || status === null) {
        return {};
    }
    const s = status as Record<string, unknown>;
    const counts = (typeof s.counts === 'object' && s.counts !== null ? s.counts : {}) as Record<string, unknown>;
    const index = (typeof s.index === 'object' && s.index !== null ? s.index : {}) as Record<string, unknown>;
    const pick = (...values: unknown[]) => values.map(countOf).find((v) => v !== undefined);
    return {
        sessions: pick(s.sessions, counts.sessions, index.sessions, s.tapes, counts.tapes, index.tapes),
        live: pick(s.live_sessions, s.live, counts.live_sessions, counts.live, index.live_sessions),
    };
}

/** `engram/status` as a Markdown document (nested objects become nested lists). */
export function renderStatusMarkdown(status: unknown, extra: Array<[string, string]> = []): string {
    const out: string[] = ['# Engram status', ''];
    const summary = summarizeStatus(status);
    if (summary.sessions !== undefined) {
        out.push(`**${summary.sessions} session${summary.sessions === 1 ? '' : 's'} indexed**${summary.live ? `, ${summary.live} live` : ''}`, '');
    }
    const key = (k: string) => k.replace(/[\\`*_<>[\]]/g, (c) => `\\${c}`);
    const code = (v: string) => (v === '' ? '–' : `\`${v.replace(/`/g, "'").replace(/\r?\n/g, ' ')}\``);
    const walk = (value: unknown, depth: number): void => {
        if (typeof value !== 'object' || value === null) {
            return;
        }
        for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
            const indent = '  '.repeat(depth);
            if (typeof v === 'object' && v !== null && !Array.isArray(v)) {
                out.push(`${indent}- **${key(k)}**`);
                walk(v, depth + 1);
            } else if (Array.isArray(v)) {
                const simple = v.every((x) => typeof x !== 'object' || x === null);
                out.push(`${indent}- **${key(k)}:** ${simple ? (v.length ? v.map((x) => code(String(x))).join(', ') : 'none') : `${v.length} item${v.length === 1 ? '' : 's'}`}`);
            } else {
                out.push(`${indent}- **${key(k)}:** ${v === null ? '–' : code(String(v))}`);
            }
        }
    };
    walk(status, 0);
    if (extra.length) {
        out.push('', '## Client', '');
        for (const [k, v] of extra) {
            out.push(`- **${key(k)}:** ${code(v)}`);
        }
    }
    out.push('');
    return out.join('\n');
}

// ---------------------------------------------------------------------------------------------------
// engram/search

export interface SearchHit {
    tapeId: string;
    offset: number;
    title: string;
    description: string;
    detail: string;
}

/** Hits of an `engram/search` result as Quick Pick rows (a list, or `{results|hits|matches: [...]}`). */
export function searchHits(result: unknown): SearchHit[] {
    let rows: unknown = result;
    if (!Array.isArray(rows) && typeof rows === 'object' && rows !== null) {
        const r = rows as Record<string, unknown>;
        rows = r.results ?? r.hits ?? r.matches ?? r.sessions ?? [];
    }
    if (!Array.isArray(rows)) {
        return [];
    }
    const hits: SearchHit[] = [];
    for (const row of rows) {
        if (typeof row !== 'object' || row === null) {
            continue;
        }
        const h = row as Record<string, unknown>;
        const tapeId = typeof h.tape_id === 'string' ? h.tape_id : typeof h.tapeId === 'string' ? h.tapeId : undefined;
        if (!tapeId) {
            continue;
        }
        const offsetRaw = h.offset ?? h.at ?? h.anchor ?? (h.windows as ExplainWindow[] | undefined)?.[0]?.anchor;
        const offset = typeof offsetRaw === 'number' ? offsetRaw : 0;
        const label = typeof h.label === 'string' && h.label ? h.label : `Tape ${shortId(tapeId)}`;
        const signals = (typeof h.signals === 'object' && h.signals !== null ? h.signals : {}) as Record<string, unknown>;
        const score = [h.score, h.confidence, signals.keyword, signals.semantic].find((v): v is number => typeof v === 'number');
        const anchorEvent = (h.windows as ExplainWindow[] | undefined)?.[0]?.events?.find((e) => e.offset === offset);
        const text = [h.text, h.snippet, h.excerpt, anchorEvent && eventText(anchorEvent)].find((v): v is string => typeof v === 'string') ?? '';
        hits.push({
            tapeId,
            offset,
            title: label,
            description: [h.harness, h.kind ?? h.k, `#${offset}`, score !== undefined ? `score ${score.toFixed(2)}` : undefined, h.via]
                .filter((v) => typeof v === 'string' && v)
                .join(' · '),
            detail: text.replace(/\s+/g, ' ').trim().slice(0, 200),
        });
    }
    return hits;
}
