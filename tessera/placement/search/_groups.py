"""Groups of nodes that can run as one partition each. A merge is allowed only when the graph
of groups stays acyclic; per-group convexity is not enough, since two convex groups can still
need each other's outputs ({a, d} and {b, c} with a->b and c->d)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tessera.ir import DataflowGraph, NodeSet, members


class GroupGraph:
    """Each node starts as its own group. Group ids are the smallest node index in the group,
    so every order derived from them is deterministic."""

    def __init__(self, flow: DataflowGraph) -> None:
        self.flow = flow
        self.group_of = list(range(len(flow)))
        self.masks: dict[int, NodeSet] = {i: 1 << i for i in range(len(flow))}
        self.succs: dict[int, dict[int, None]] = {
            i: dict.fromkeys(flow.consumers[i]) for i in range(len(flow))}
        self.preds: dict[int, dict[int, None]] = {
            i: dict.fromkeys(flow.producers[i]) for i in range(len(flow))}

    def copy(self) -> GroupGraph:
        other = GroupGraph.__new__(GroupGraph)
        other.flow = self.flow
        other.group_of = list(self.group_of)
        other.masks = dict(self.masks)
        other.succs = {g: dict(s) for g, s in self.succs.items()}
        other.preds = {g: dict(p) for g, p in self.preds.items()}
        return other

    def _reaches_indirectly(self, start: int, goal: int) -> bool:
        """A path start -> ... -> goal through at least one other group."""
        stack = [g for g in self.succs[start] if g != goal]
        seen = dict.fromkeys(stack)
        while stack:
            g = stack.pop()
            for h in self.succs[g]:
                if h == goal:
                    return True
                if h not in seen:
                    seen[h] = None
                    stack.append(h)
        return False

    def can_merge(self, a: int, b: int) -> bool:
        a, b = self.group_of[a], self.group_of[b]
        if a == b:
            return True
        return not (self._reaches_indirectly(a, b) or self._reaches_indirectly(b, a))

    def merge(self, a: int, b: int) -> int:
        """Merge the groups of nodes a and b (the caller checked `can_merge`)."""
        a, b = self.group_of[a], self.group_of[b]
        if a == b:
            return a
        keep, gone = min(a, b), max(a, b)
        for i in members(self.masks[gone]):
            self.group_of[i] = keep
        self.masks[keep] |= self.masks.pop(gone)
        for s in self.succs.pop(gone):
            self.preds[s].pop(gone, None)
            if s != keep:
                self.preds[s][keep] = None
                self.succs[keep][s] = None
        for p in self.preds.pop(gone):
            self.succs[p].pop(gone, None)
            if p != keep:
                self.succs[p][keep] = None
                self.preds[keep][p] = None
        self.succs[keep].pop(gone, None)
        self.preds[keep].pop(gone, None)
        self.succs[keep].pop(keep, None)
        self.preds[keep].pop(keep, None)
        return keep

    def split(self, group: int) -> None:
        """Undo a group: its nodes become singletons again (never creates a cycle)."""
        mask = self.masks.pop(group)
        for s in self.succs.pop(group):
            self.preds[s].pop(group, None)
        for p in self.preds.pop(group):
            self.succs[p].pop(group, None)
        flow = self.flow
        for i in members(mask):
            self.group_of[i] = i
            self.masks[i] = 1 << i
            self.succs[i], self.preds[i] = {}, {}
        for i in members(mask):
            for c in flow.consumers[i]:
                self._link(i, self.group_of[c])
            for p in flow.producers[i]:
                self._link(self.group_of[p], i)

    def _link(self, a: int, b: int) -> None:
        if a != b:
            self.succs[a][b] = None
            self.preds[b][a] = None

    def groups_in_order(self) -> Iterator[NodeSet]:
        """Group masks in a topological order of the group graph, ties by group id."""
        import heapq

        waiting = {g: len(p) for g, p in self.preds.items()}
        ready = [g for g, n in waiting.items() if n == 0]
        heapq.heapify(ready)
        while ready:
            g = heapq.heappop(ready)
            yield self.masks[g]
            for s in self.succs[g]:
                waiting[s] -= 1
                if waiting[s] == 0:
                    heapq.heappush(ready, s)


_SIBLING_LIMIT = 64  # pairwise sibling merging is quadratic; beyond this, edges only


def fuse(groups: GroupGraph, nodes: Sequence[int], *, siblings: bool = True) -> list[int]:
    """Merge `nodes` along their dataflow edges wherever the group graph stays acyclic, in
    topological edge order; then (with `siblings`) merge the resulting groups with each other
    where that stays acyclic, as ONNX Runtime does for independent branches of one backend.
    Returns the resulting group ids, ascending."""
    flow = groups.flow
    chosen = dict.fromkeys(nodes)
    for i in sorted(chosen):
        for c in flow.consumers[i]:
            if c in chosen and groups.group_of[i] != groups.group_of[c] \
                    and groups.can_merge(i, c):
                groups.merge(i, c)
    ids = sorted(dict.fromkeys(groups.group_of[i] for i in chosen))
    if siblings and 1 < len(ids) <= _SIBLING_LIMIT:
        for a in ids:
            for b in ids:
                if a < b and groups.group_of[a] != groups.group_of[b] \
                        and groups.can_merge(a, b):
                    groups.merge(a, b)
        ids = sorted(dict.fromkeys(groups.group_of[i] for i in chosen))
    return ids
