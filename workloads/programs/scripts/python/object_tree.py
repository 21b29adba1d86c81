"""Object trees: build a tree of small objects, walk it, drop it, repeat, with gc on.

Usage: python3 object_tree.py N

Each of ROUNDS rounds builds a tree of about N nodes. Inner nodes are
instances of a class with __slots__ (key, children list, a back pointer to the
parent, a payload tuple); every fourth node is instead an instance of a class
without __slots__ (so it carries an instance __dict__) with a few extra
attributes, and the leaves hang small tuples and short strings off their
nodes. The parent pointers make every tree one big reference cycle, so
dropping it leaves the work to the cyclic garbage collector, which stays
enabled throughout (and runs on its own while the tree is built, as in any
allocation-heavy program). Each tree is walked twice, depth first with an
explicit stack and breadth first, and the two walks must agree; then half of
the subtrees are cut off and replaced by fresh ones before the final walk, so
old and new objects mix.

Output: the node count, the depth reached and a checksum per round, and a
sha256 over all rounds. All shapes come from a seeded PRNG, so the output
depends on N only. Exit status 1 when the walks disagree.
"""

import collections
import gc
import hashlib
import random
import sys

ROUNDS = 4
MASK = (1 << 64) - 1


class Node:
    __slots__ = ("key", "children", "parent", "payload")

    def __init__(self, key, parent, payload):
        self.key = key
        self.children = []
        self.parent = parent
        self.payload = payload


class FatNode:
    """A node without __slots__: its attributes live in a per-instance dict."""

    def __init__(self, key, parent, payload):
        self.key = key
        self.children = []
        self.parent = parent
        self.payload = payload
        self.label = "fat-%d" % key
        self.extra = {"k": key & 255}


def grow(root, budget, rng, next_key):
    """Attach about `budget` new nodes under root; returns the next unused key."""
    bits = rng.getrandbits
    frontier = [root]
    made = 0
    while made < budget and frontier:
        i = bits(31) % len(frontier)
        parent = frontier[i]
        fanout = 1 + bits(2)
        for _ in range(fanout):
            key = next_key
            next_key += 1
            payload = (key & 0xFFFF, "n%d" % (key % 997), (key * 7) & 0xFF)
            cls = FatNode if key % 4 == 0 else Node
            child = cls(key, parent, payload)
            parent.children.append(child)
            frontier.append(child)
            made += 1
        if len(parent.children) > 6:
            frontier[i] = frontier[-1]
            frontier.pop()
    return next_key


def walk_dfs(root):
    count = depth_max = 0
    acc = 0
    stack = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > depth_max:
            depth_max = depth
        p = node.payload
        acc = (acc + p[0] * 31 + len(p[1]) + p[2] + depth) & MASK
        if node.parent is not None and node not in node.parent.children:
            return None  # a child must be in its parent's list
        for c in node.children:
            stack.append((c, depth + 1))
    return count, depth_max, acc


def walk_bfs(root):
    count = depth_max = 0
    acc = 0
    queue = collections.deque([(root, 0)])
    while queue:
        node, depth = queue.popleft()
        count += 1
        if depth > depth_max:
            depth_max = depth
        p = node.payload
        acc = (acc + p[0] * 31 + len(p[1]) + p[2] + depth) & MASK
        queue.extend((c, depth + 1) for c in node.children)
    return count, depth_max, acc


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
    gc.enable()
    rng = random.Random(0x7EE + n)
    digest = hashlib.sha256()
    lines = []
    for r in range(ROUNDS):
        root = Node(0, None, (0, "root", 0))
        next_key = grow(root, n, rng, 1)
        first = walk_dfs(root)
        if first is None or first != walk_bfs(root):
            print("round %d: the depth-first and breadth-first walks disagree" % r, file=sys.stderr)
            return 1
        # Replace every other subtree of the root (and of its children) with a fresh one.
        old = fresh = None
        for top in [root] + root.children:
            for i in range(0, len(top.children), 2):
                old = top.children[i]
                size = walk_bfs(old)[0]
                fresh = Node(next_key, top, (next_key & 0xFFFF, "r%d" % r, 1))
                next_key = grow(fresh, size, rng, next_key + 1)
                old.parent = None
                top.children[i] = fresh
        second = walk_dfs(root)
        if second is None or second != walk_bfs(root):
            print("round %d: the walks disagree after the subtrees were replaced" % r, file=sys.stderr)
            return 1
        lines.append("round %d nodes %d/%d depth %d/%d checksum %016x/%016x" % (
            r, first[0], second[0], first[1], second[1], first[2], second[2]))
        digest.update(lines[-1].encode())
        root = top = old = fresh = None  # the cycles are now garbage, for the collector
    gc.collect()
    for line in lines:
        print(line)
    print("rounds %d sha256 %s" % (ROUNDS, digest.hexdigest()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
