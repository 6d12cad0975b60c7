"""The structure of a package measured from its imports: its rooms (direct children: modules
and subpackages), the import arrows between them, the levels they stand on, and any cycles.

    python scripts/structure.py server        # or validator, executor, graph_proto

A room's level is 1 + the highest level of the rooms it imports (1: imports no sibling), so the
number of levels is the longest chain of imports among the rooms. Uses grimp (import-linter's
import graph), a test dependency.
"""

from __future__ import annotations

import sys
from functools import cache

import grimp


def rooms_and_arrows(package: str) -> tuple[list[str], set[tuple[str, str]]]:
    graph = grimp.build_graph(package)
    rooms = sorted(graph.find_children(package))

    def room_of(module: str) -> str | None:
        for room in rooms:
            if module == room or module.startswith(room + "."):
                return room
        return None

    arrows = set()
    for room in rooms:
        for module in {room} | graph.find_descendants(room):
            for imported in graph.find_modules_directly_imported_by(module):
                target = room_of(imported)
                if target is not None and target != room:
                    arrows.add((room, target))
    return rooms, arrows


def cycles(rooms: list[str], arrows: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected groups of more than one room (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(room: str) -> None:
        index[room] = low[room] = len(index)
        stack.append(room)
        for source, target in arrows:
            if source != room:
                continue
            if target not in index:
                visit(target)
                low[room] = min(low[room], low[target])
            elif target in stack:
                low[room] = min(low[room], index[target])
        if low[room] == index[room]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == room:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for room in rooms:
        if room not in index:
            visit(room)
    return found


def levels(rooms: list[str], arrows: set[tuple[str, str]]) -> dict[str, int]:
    @cache
    def level(room: str, seen: frozenset[str] = frozenset()) -> int:
        below = [t for s, t in arrows if s == room and t not in seen]
        return 1 + max((level(t, seen | {room}) for t in below), default=0)

    return {room: level(room) for room in rooms}


def main(package: str) -> None:
    rooms, arrows = rooms_and_arrows(package)
    found = cycles(rooms, arrows)
    floors = levels(rooms, arrows)
    print(
        f"{package}: {len(rooms)} rooms, {len(arrows)} import arrows between them, "
        f"{max(floors.values())} levels, {len(found)} cycles"
    )
    for group in found:
        print("  cycle:", " <-> ".join(group))
    for room in sorted(rooms, key=lambda r: (-floors[r], r)):
        targets = sorted(t.rsplit(".", 1)[1] for s, t in arrows if s == room)
        print(f"  {floors[room]:2d}  {room.rsplit('.', 1)[1]:<12} -> {', '.join(targets)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "server")
