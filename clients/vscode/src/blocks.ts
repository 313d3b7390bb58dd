/**
 * The block around a line, for "Explain Selection" with nothing selected: the innermost function /
 * class / block whose header is at or above the line (by indentation, with closing-brace lines and
 * decorators), else the paragraph. Pure; used when no document-symbol provider knows better.
 * Lines are 0-based; the result is inclusive.
 */

function indent(line: string): number {
    const m = /^[ \t]*/.exec(line);
    return m ? m[0].replace(/\t/g, '    ').length : 0;
}

const blank = (line: string | undefined) => line === undefined || line.trim() === '';

function nextNonBlank(lines: string[], from: number): number | undefined {
    for (let i = from; i < lines.length; i++) {
        if (!blank(lines[i])) {
            return i;
        }
    }
    return undefined;
}

export function enclosingBlock(lines: string[], line: number): [number, number] {
    if (lines.length === 0) {
        return [0, 0];
    }
    let cur = Math.min(Math.max(0, line), lines.length - 1);
    while (cur > 0 && blank(lines[cur])) {
        cur--;
    }
    if (blank(lines[cur])) {
        return [line, line];
    }
    // The header: this line when it opens a more-indented body, else the nearest less-indented line above.
    let header = cur;
    const after = nextNonBlank(lines, cur + 1);
    if (after === undefined || indent(lines[after]) <= indent(lines[cur])) {
        for (let i = cur - 1; i >= 0; i--) {
            if (!blank(lines[i]) && indent(lines[i]) < indent(lines[cur])) {
                header = i;
                break;
            }
        }
    }
    const base = indent(lines[header]);
    let end = header;
    for (let i = header + 1; i < lines.length; i++) {
        if (blank(lines[i])) {
            continue;
        }
        if (indent(lines[i]) > base) {
            end = i;
            continue;
        }
        if (indent(lines[i]) === base && /^\s*[)\]}]/.test(lines[i])) {
            end = i; // closing brace of a C-like block
        }
        break;
    }
    let start = header;
    while (start > 0 && !blank(lines[start - 1]) && indent(lines[start - 1]) === base && /^\s*@/.test(lines[start - 1])) {
        start--; // decorators
    }
    if (start === end) {
        // No body: the paragraph around the line.
        while (start > 0 && !blank(lines[start - 1])) {
            start--;
        }
        while (end < lines.length - 1 && !blank(lines[end + 1])) {
            end++;
        }
    }
    return [start, end];
}
