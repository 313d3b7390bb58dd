/**
 * The line annotation as data: engram/annotate's answer → what to draw (no VS Code import: the unit
 * tests load this module). One colour per session, by the session's index in the answer (the server
 * lists sessions in the order they first appear in the file, so neighbouring runs differ and the
 * same file always gets the same colours); lines in no run are hand-written or only read: unmarked.
 */

/** Eight colours that stay apart on dark and light themes (Tableau 10's first eight). */
export const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7'] as const;

export interface AnnotateSession {
    tape_id: string;
    session?: string | null;
    harness?: string | null;
    model?: string | null;
    label?: string | null;
    first_t?: string | null;
    last_t?: string | null;
    lines?: number;
}

export interface AnnotateRun {
    /** 0-based, inclusive. */
    start: number;
    end: number;
    session: number;
    via?: string | null;
}

export interface AnnotateResult {
    uri: string;
    version: number | null;
    lines: number;
    sessions: AnnotateSession[];
    runs: AnnotateRun[];
}

/** One run to draw: its lines, its colour, the label shown on its first line and the hover text. */
export interface RunDecoration {
    start: number;
    end: number;
    color: number;
    label: string;
    hover: string;
    tapeId: string;
}

export function isAnnotateResult(value: unknown): value is AnnotateResult {
    const v = value as AnnotateResult;
    return typeof v === 'object' && v !== null && Array.isArray(v.sessions) && Array.isArray(v.runs);
}

export function colorOf(session: number): number {
    return ((session % PALETTE.length) + PALETTE.length) % PALETTE.length;
}

function oneLine(text: string | null | undefined, limit: number): string {
    const s = String(text ?? '').replace(/\s+/g, ' ').trim();
    return s.length > limit ? `${s.slice(0, limit - 1)}…` : s;
}

/** The label at the end of a run's first line: the user's request, else the session id. */
export function sessionLabel(session: AnnotateSession, limit = 60): string {
    const what = oneLine(session.label, limit) || oneLine(session.session, limit) || session.tape_id.slice(0, 12);
    return `${what} · ${session.harness ?? 'agent'}`;
}

/** Markdown for the hover of an annotated line. */
export function sessionHover(session: AnnotateSession, run: AnnotateRun): string {
    const lines = [`**Engram** · lines ${run.start + 1}–${run.end + 1} written by`, '', `> ${oneLine(session.label, 300) || '(no request logged)'}`, ''];
    const meta = [session.harness, session.model, session.last_t ? `last ${session.last_t}` : undefined, `${session.lines ?? '?'} lines in this file`];
    lines.push(meta.filter(Boolean).join(' · '));
    lines.push('', `tape \`${session.tape_id}\`${run.via === 'log' ? ' · through the logged edits' : ' · by fingerprints'}`);
    return lines.join('\n');
}

/** What to draw for an answer, clipped to the document's `lineCount` (the buffer may have changed). */
export function runDecorations(result: AnnotateResult, lineCount: number): RunDecoration[] {
    const out: RunDecoration[] = [];
    for (const run of result.runs) {
        const session = result.sessions[run.session];
        if (!session || run.start >= lineCount || run.end < run.start) {
            continue;
        }
        out.push({
            start: run.start,
            end: Math.min(run.end, lineCount - 1),
            color: colorOf(run.session),
            label: sessionLabel(session),
            hover: sessionHover(session, run),
            tapeId: session.tape_id,
        });
    }
    return out;
}

/** A one-line summary for the log and the status message. */
export function summarize(result: AnnotateResult): string {
    const marked = result.runs.reduce((n, r) => n + (r.end - r.start + 1), 0);
    return `${result.sessions.length} session${result.sessions.length === 1 ? '' : 's'}, ${marked} of ${result.lines} lines, ${result.runs.length} runs`;
}
