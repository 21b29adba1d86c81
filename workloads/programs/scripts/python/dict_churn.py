"""Dict and list churn: a working set of string-keyed entries that grows and shrinks.

Usage: python3 dict_churn.py N

N operations on a dict of short string keys ("u:<id>:<generation>") whose values
are small lists. The working set follows a wave: in a growing phase most
operations insert, in a shrinking phase most delete, so the table resizes up
and, through the deleted entries it has to sweep out, rebuilds smaller again.
Every operation also looks keys up (hits and misses), builds and drops a
short-lived key string and a small record, and appends to or pops from one of
a few hundred bucket lists whose lengths swing between empty and a few
hundred items. Every few thousand operations a temporary dict and a list are
built from a slice of the working set and dropped.

Output: counts of each kind of operation, the final sizes and a checksum of
every value looked up, plus a sha256 of the final working set in sorted order.
All choices come from a seeded PRNG, so the output depends on N only. Exit
status 1 when an internal cross-check fails (sizes, indexes, values).
"""

import hashlib
import random
import sys

MASK = (1 << 64) - 1


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
    rng = random.Random(0xD1C7 + n)
    bits = rng.getrandbits
    live = {}      # key -> [slot in keys, id, generation, payload...]
    keys = []      # the live keys, for picking one at random (swap-remove on delete)
    buckets = [[] for _ in range(256)]
    tally = {}     # key prefix -> count, a small dict updated every operation
    inserts = deletes = hits = misses = temps = 0
    checksum = 0
    generation = 0
    peak = 0
    period = max(1000, n // 4)  # four grow-and-shrink waves
    for op in range(n):
        phase = (op // (period // 2)) % 2  # 0: growing, 1: shrinking
        r = bits(10)
        grow = r < (900 if phase == 0 else 250)
        if grow or not keys:
            ident = bits(24)
            generation += 1
            key = "u:%x:%d" % (ident, generation)
            live[key] = [len(keys), ident, generation, "v%d" % (ident & 1023), ident & 7]
            keys.append(key)
            inserts += 1
        else:
            i = bits(31) % len(keys)
            key = keys[i]
            entry = live.pop(key)
            if entry[0] != i:
                print("op %d: the entry of %s says slot %d, not %d" % (op, key, entry[0], i), file=sys.stderr)
                return 1
            last = keys.pop()
            if last != key:
                keys[i] = last
                live[last][0] = i
            deletes += 1
        # Lookups: one that hits (when anything is live) and one that most likely misses.
        if keys:
            key = keys[bits(31) % len(keys)]
            entry = live[key]
            if key != "u:%x:%d" % (entry[1], entry[2]):
                print("op %d: key %s holds the value of another key" % (op, key), file=sys.stderr)
                return 1
            checksum = ((checksum * 1000003) ^ entry[1] ^ (entry[2] << 24)) & MASK
            hits += 1
        probe = "u:%x:%d" % (bits(24), bits(20))
        if probe in live:
            hits += 1
        else:
            misses += 1
        # A short-lived record and a tally keyed by a slice of a string.
        record = {"op": op, "key": probe, "tags": [probe[:4], probe[-3:]], "r": r}
        prefix = record["key"][:3]
        tally[prefix] = tally.get(prefix, 0) + 1
        # Bucket lists swing between empty and a few hundred items.
        b = buckets[r & 255]
        if phase == 0 or not b:
            b.append((op, r))
            if len(b) > 400:
                del b[: len(b) // 2]
        else:
            b.pop()
        # Now and then, a temporary dict and list over a slice of the working set.
        if op % 4096 == 4095 and keys:
            start = bits(31) % len(keys)
            window = keys[start : start + 2000]
            index = {k: live[k][1] for k in window}
            inverted = {}
            for k, v in index.items():
                inverted.setdefault(v & 63, []).append(k)
            flat = sorted(v for v in index.values())
            checksum = ((checksum * 1000003) ^ len(inverted) ^ (sum(flat) & 0xFFFFFFFF)) & MASK
            temps += 1
            del window, index, inverted, flat
        if len(keys) > peak:
            peak = len(keys)
    if len(live) != len(keys) or inserts - deletes != len(live):
        print("sizes disagree: dict %d list %d inserts-deletes %d" % (len(live), len(keys), inserts - deletes), file=sys.stderr)
        return 1
    h = hashlib.sha256()
    for key in sorted(live):
        e = live[key]
        h.update(("%s=%d,%d,%s,%d;" % (key, e[1], e[2], e[3], e[4])).encode())
    bucket_items = sum(len(b) for b in buckets)
    print("ops %d inserts %d deletes %d hits %d misses %d temps %d" % (n, inserts, deletes, hits, misses, temps))
    print("live %d peak %d bucket items %d tally keys %d" % (len(live), peak, bucket_items, len(tally)))
    print("checksum %016x sha256 %s" % (checksum, h.hexdigest()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
