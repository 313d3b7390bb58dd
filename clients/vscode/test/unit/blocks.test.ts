import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { enclosingBlock } from '../../src/blocks';

const PY = `#!/usr/bin/env python3

import os

@decorator
def main():
    x = 1

    if x:
        print("Hello")
    return x

if __name__ == "__main__":
    main()
`.split('\n');

const TS = `export class A {
    run(): void {
        console.log('x');
    }
}
`.split('\n');

describe('enclosingBlock', () => {
    it('a function from its header, with its decorator', () => {
        assert.deepEqual(enclosingBlock(PY, 5), [4, 10]);
    });
    it('from inside the body: the innermost block', () => {
        assert.deepEqual(enclosingBlock(PY, 9), [8, 9]);
        assert.deepEqual(enclosingBlock(PY, 6), [4, 10]);
        assert.deepEqual(enclosingBlock(PY, 10), [4, 10]);
    });
    it('a blank line belongs to the block above it', () => {
        assert.deepEqual(enclosingBlock(PY, 7), [4, 10]);
    });
    it('a statement without a body: its paragraph', () => {
        assert.deepEqual(enclosingBlock(PY, 2), [2, 2]);
        assert.deepEqual(enclosingBlock(PY, 0), [0, 0]);
    });
    it('brace languages include the closing brace', () => {
        assert.deepEqual(enclosingBlock(TS, 0), [0, 4]);
        assert.deepEqual(enclosingBlock(TS, 1), [1, 3]);
        assert.deepEqual(enclosingBlock(TS, 2), [1, 3]);
    });
    it('degenerate input', () => {
        assert.deepEqual(enclosingBlock([], 3), [0, 0]);
        assert.deepEqual(enclosingBlock(['', ''], 1), [1, 1]);
    });
});
