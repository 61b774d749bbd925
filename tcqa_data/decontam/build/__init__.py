"""``index-corpus``: build an index (``INDEX_DIR``) from corpus files or a hub dataset.

- ``index.py``: ``build_index`` (plan, maps, reduce, commit, then the text store pass) and
  ``index_info``;
- ``map.py``: one input shard -> n-gram runs, docs table, MinHash part (``map_shard``), and the
  loop that runs the maps;
- ``reduce.py``: the bucket, docs-table and MinHash reduces, and the commit;
- ``preflight.py``: checks before anything is written.

The public API is re-exported here (``from tcqa_data.decontam.build import build_index``).
"""

from tcqa_data.decontam.build.index import HfSpec, build_index, index_info
from tcqa_data.decontam.build.map import map_shard

__all__ = ["HfSpec", "build_index", "index_info", "map_shard"]
