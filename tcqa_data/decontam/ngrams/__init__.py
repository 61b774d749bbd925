"""The n-gram index: ``index`` (the on-disk layout, ``NgramIndex`` and its lookups), ``runs``
(the map's runs: n-gram hashes partitioned by bucket and cell), ``reduce`` (one bucket's merge of
every run, written as index files) and ``merge`` (the merge of a chunk's pairs)."""
