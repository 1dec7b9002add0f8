"""Kafka's on-disk formats: one module per file kind.

- ``record_batch``: ``.log`` contents (record batches, magic 0/1/2, codecs, CRC)
- ``offset_index``: ``.index``; ``time_index``: ``.timeindex``
- ``segment_names``: segment file names and suffixes
- ``checkpoints``: ``offset.wm``, ``leader-epoch-checkpoint`` and Kafka's other checkpoint files
"""
