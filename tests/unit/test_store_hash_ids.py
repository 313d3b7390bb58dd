"""``store._HashIds`` (``BlockIds``' older ids as sorted arrays) gives back the id of every hash it
holds — hashes sharing their first 8 bytes included — and None for any other, and forgets all
before holding more than its cap."""

import random

from engram.index.store import _HashIds


def test_ids_by_hash():
    rng = random.Random(21)
    m, ref = _HashIds(), {}
    for _ in range(20):
        items = []
        for _ in range(rng.randrange(0, 50)):
            head = rng.choice([b"\x00" * 8, b"\xff" * 8, rng.randbytes(8)])
            h = head + rng.choice([b"\x00" * 8, b"\xff" * 8, rng.randbytes(8)])
            if h not in ref:
                ref[h] = rng.randrange(1, 1 << 40)
                items.append((h, ref[h]))
        m.add(items, 10_000)
        for h, b in ref.items():
            assert m.get(h) == b
        for _ in range(50):
            assert m.get(rng.randbytes(16)) is None
        assert m.get(b"short") is None


def test_forgets_past_its_cap():
    m = _HashIds()
    a = [(bytes([i]) * 16, i) for i in range(1, 4)]
    b = [(bytes([i]) * 16, i) for i in range(4, 6)]
    m.add(a, 4)
    assert [m.get(h) for h, _ in a] == [1, 2, 3]
    m.add(b, 4)   # 5 > 4: the older ones forgotten
    assert [m.get(h) for h, _ in a] == [None] * 3 and [m.get(h) for h, _ in b] == [4, 5]
    m.add([(bytes([9]) * 16, 9)] * 1 + [(bytes([i]) * 16, i) for i in range(10, 16)], 4)
    assert len(m.ids) == 4 and m.get(bytes([15]) * 16) == 15
