"""The layout of a map's scratch outputs, shared by the build (which writes them) and the text
store (which reads the anchors the map staged).

``MAP_FORMAT``: the version of that layout (its runs, staged anchors and MinHash part: build
scratch, not index format). plan.json records it, and a build resumed by code that writes another
layout redoes the finished maps instead of reading them: bump it whenever those files change.

The map's anchors (the full build's compiled JSONL path): each map shard winnows the normalized
bytes it already holds and keeps the kept hashes (in doc order, ``MAP_HASHES``) and their count per
doc (``MAP_COUNTS``); the reduce stages them as ``<key>.map-<shard>.anchors.{hashes,counts}.npy``
(``staged_anchor_file``) with ``<key>.map.json`` (the shards' doc counts and ``map_format``) in the
text store's folder, and the text store pass writes the input's runs from them instead of reading
and normalizing the input again. The store's cleanup deletes them.
"""

from __future__ import annotations

MAP_FORMAT = 1
MAP_HASHES, MAP_COUNTS = "anchors.hashes.npy", "anchors.counts.npy"


def staged_anchor_file(key: str, shard: int, name: str) -> str:
    """The staged file of input ``key``'s map shard ``shard``: ``name`` is MAP_HASHES or MAP_COUNTS."""
    return f"{key}.map-{shard:05d}.{name}"
