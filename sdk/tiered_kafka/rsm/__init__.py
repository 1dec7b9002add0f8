"""Kafka's own tiered storage (KIP-405) as written by Aiven's RemoteStorageManager (the "RSM").

Aiven-Open/tiered-storage-for-apache-kafka, read at commit 8fb15816 (``core/src/main/java/io/aiven/kafka/
tieredstorage``), uploads each remote log segment as three objects (``KafkaRemoteStorageManager.copyLogSegmentData``,
in this order, deleting all three when one upload fails)::

    {prefix}{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}.log            chunked, maybe zstd, maybe AES-GCM
    {prefix}{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}.indexes        five indexes, concatenated
    {prefix}{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}.rsm-manifest   JSON, version "1"

and the broker records the segment's life in Kafka's ``__remote_log_metadata`` topic. One module per contract:

* :mod:`~tiered_kafka.rsm.keys` - object keys (``ObjectKeyFactory``) and Kafka's Uuid text form;
* :mod:`~tiered_kafka.rsm.chunk_index` - ``FixedSizeChunkIndex`` / ``VariableSizeChunkIndex`` and
  ``ChunkSizesBinaryCodec``: original byte ranges to transformed chunks;
* :mod:`~tiered_kafka.rsm.manifest` - the ``.rsm-manifest`` JSON (``SegmentManifestV1``), validated field by field;
* :mod:`~tiered_kafka.rsm.keyring` - RSA key ring and the data key wrap (``RsaEncryptionProvider``, ``EncryptedDataKey``);
* :mod:`~tiered_kafka.rsm.transform` - chunk (de)transforms: zstd per chunk, AES-256-GCM per chunk;
* :mod:`~tiered_kafka.rsm.indexes` - slicing the ``.indexes`` object (``SegmentIndexesV1``);
* :mod:`~tiered_kafka.rsm.remote_log_metadata` - ``__remote_log_metadata`` records and the live segment set.

Errors are :class:`~tiered_kafka.errors.RsmFormatError` and :class:`~tiered_kafka.errors.RsmDecryptionError`.
Decryption needs the ``gateway`` extra (cryptography, pycryptodome); everything else is pure Python + cramjam.
"""
