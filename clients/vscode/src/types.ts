/** Shapes of engram-lsp's results (docs/architecture.md, "The explain result"). Fields the client does not use are kept
 * optional so that a newer server can add to them. */

export interface TapeEvent {
    offset: number;
    t?: string;
    k: string;
    text?: string;
    tool?: string;
    call_id?: string;
    args?: unknown;
    stdout?: string;
    stderr?: string;
    exit?: number | null;
    file?: string;
    range?: [number, number];
    before_range?: [number, number];
    after_range?: [number, number];
    before_text?: string;
    after_text?: string;
    from_file?: string;
    from_range?: [number, number];
    to_file?: string;
    to_range?: [number, number];
    note?: string;
    [key: string]: unknown;
}

export interface ExplainWindow {
    anchor: number;
    kind?: string;
    confidence?: number;
    file?: string;
    /** Absent for sessions ranked below the server's `window.sessions`: their anchor only. */
    events?: TapeEvent[];
}

export interface ExplainSession {
    tape_id: string;
    harness?: string;
    session?: string;
    tier?: string | null;
    label?: string | null;
    model?: string | null;
    cwd?: string | null;
    first_t?: string | null;
    last_t?: string | null;
    confidence?: number;
    touches?: number;
    via?: string;
    signals?: { fingerprint?: number | null; semantic?: number | null };
    windows?: ExplainWindow[];
    live?: boolean;
}

export interface LineageEdge {
    from: { tape_id: string; offset: number };
    to: { tape_id: string; offset: number };
    confidence?: number;
    location_delta?: string;
    cardinality?: string;
    agent_link?: boolean;
}

export interface Tombstone {
    tape_id?: string;
    offset?: number;
    file?: string;
    range?: [number, number];
    t?: string;
    [key: string]: unknown;
}

export interface ExplainResult {
    span?: { file?: string; start?: number; end?: number; requested?: [number, number] };
    sessions: ExplainSession[];
    lineage?: LineageEdge[];
    tombstones?: Tombstone[];
    truncated?: { fanout?: boolean; edges?: boolean };
    stats?: { fingerprints?: number; matched?: number; elapsed_ms?: number };
}

/** `engram/view` result. The design fixes the request, not the result's shape beyond "events of a
 * tape around an offset"; the renderer accepts the plausible spellings. */
export interface ViewResult {
    tape_id?: string;
    at?: number;
    meta?: Record<string, unknown>;
    events?: TapeEvent[];
    total?: number;
    [key: string]: unknown;
}
