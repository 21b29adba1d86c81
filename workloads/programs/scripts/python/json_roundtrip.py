"""JSON round trip: build a large nested document, dump it, load it back, compare.

Usage: python3 json_roundtrip.py N

N is the number of top-level records; each record is a dict of strings, ints,
floats, booleans, None, a list of ints and a list of small dicts (about 21
scalar values on average), so the document holds about 21 * N values. The
document is dumped once in canonical form (sorted keys, compact separators);
then ROUNDS rounds take three shapes in turn: parse the canonical text; dump
the document in json's default, ASCII-escaped form and parse that; dump the
last parsed copy in canonical form, which must give the canonical text back.
Every parsed copy must equal the original. The dump text (a few hundred bytes
per record, one string of megabytes grown by the encoder) and the parsed
copies (many small objects, growing lists and dicts) are dropped and rebuilt
every round.

Output: three lines with the sizes, the number of values and a sha256 of the
canonical dump. Everything comes from a seeded PRNG, so the output depends on
N only. Exit status 1 when a round trip does not give back what went in.
"""

import hashlib
import json
import random
import sys

ROUNDS = 3
WORDS = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
    "india", "juliett", "kilo", "lima", "mike", "november", "oscar", "papa",
    "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey",
    "x-ray", "yankee", "zulu", "caf\u00e9", "na\u00efve", "\u00fcber", "\u65e5\u672c",
]


def build(n, rng):
    """The document and the number of scalar values in it."""
    doc = {"version": 3, "generator": "alloclab json_roundtrip", "records": []}
    records = doc["records"]
    values = 2
    bits = rng.getrandbits
    for i in range(n):
        tags = [WORDS[bits(16) % len(WORDS)] for _ in range(1 + bits(2))]
        items = [
            {"sku": "SKU-%06d-%d" % (bits(20), j), "qty": bits(7), "price": round(rng.random() * 1000.0, 2)}
            for j in range(bits(2) + 1)
        ]
        counts = [bits(12) for _ in range(bits(4))]
        records.append({
            "id": i,
            "name": " ".join(tags),
            "score": rng.random() * 100.0 - 50.0,
            "active": bool(bits(1)),
            "parent": None if i == 0 or bits(2) == 0 else bits(30) % i,
            "counts": counts,
            "items": items,
            "note": "" if bits(1) else "line %d\n\t\"quoted\" \\ %s" % (i, tags[0]),
        })
        values += 6 + len(counts) + 3 * len(items)
    return doc, values


def compact(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    rng = random.Random(0x5EED0000 + n)
    doc, values = build(n, rng)
    canonical = compact(doc)
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    ascii_chars = 0
    back = None
    for r in range(ROUNDS):
        # Three shapes in turn, so the encoder's and the decoder's buffers take different
        # sizes from round to round: parse the canonical text; dump the document in the
        # default, ASCII-escaped form and parse that; dump the last parsed copy (not the
        # original) in canonical form, which must give the canonical text back.
        kind = r % 3
        if kind == 0:
            back = json.loads(canonical)
        elif kind == 1:
            text = json.dumps(doc)
            ascii_chars = len(text)
            back = json.loads(text)
            del text
        else:
            if compact(back) != canonical:
                print("round %d: the parsed copy does not dump to the canonical text" % r, file=sys.stderr)
                return 1
            back = None
            continue
        if back != doc:
            print("round %d: json.loads(json.dumps(doc)) != doc" % r, file=sys.stderr)
            return 1
    print("records %d values %d" % (n, values))
    print("canonical chars %d ascii chars %d" % (len(canonical), ascii_chars))
    print("rounds %d sha256 %s" % (ROUNDS, digest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
