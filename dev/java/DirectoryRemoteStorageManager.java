/*
 * A RemoteStorageManager for tests on Kafka lines that publish no test RemoteStorageManager (4.x: Kafka's own
 * LocalTieredStorage ships only in the 3.9 line's kafka-storage test jar, and does not load in 4.x).
 *
 * It keeps every file the broker's RemoteLogManager hands it (LogSegmentData) as it came, in LocalTieredStorage's
 * layout, so that one reader (tiered_kafka_dev.services._kip405.remote_filesets) reads both:
 *
 *   {dir}/kafka-tiered-storage/{topic}-{partition}-{topicId}/{startOffset:020d}-{segmentId}.{suffix}
 *
 * suffixes: log, index, timeindex, txnindex (only when the segment has one), snapshot, leader_epoch_checkpoint.
 * Fetches read those files back: fetchLogSegment's end position is inclusive (RemoteStorageManager's contract);
 * a missing transaction index is RemoteResourceNotFoundException, which Kafka expects for it.
 *
 * Configuration (after Kafka strips remote.log.storage.manager.impl.prefix): "dir", the storage directory.
 * Compiled by dev/tiered_kafka_dev/services/_kip405.py (javac, against the Kafka jars it runs with).
 */
package tieredkafka.dev;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Map;
import java.util.Optional;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

public final class DirectoryRemoteStorageManager implements RemoteStorageManager {
    private static final String[] SUFFIXES = {"log", "index", "timeindex", "txnindex", "snapshot", "leader_epoch_checkpoint"};
    private volatile Path root;

    @Override
    public void configure(Map<String, ?> configs) {
        Object dir = configs.get("dir");
        if (dir == null) {
            throw new IllegalArgumentException("DirectoryRemoteStorageManager needs the config \"dir\"");
        }
        root = Paths.get(dir.toString()).resolve("kafka-tiered-storage");
        try {
            Files.createDirectories(root);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private Path file(RemoteLogSegmentMetadata metadata, String suffix) {
        TopicIdPartition tip = metadata.remoteLogSegmentId().topicIdPartition();
        String directory = tip.topic() + "-" + tip.partition() + "-" + tip.topicId();
        String name = String.format("%020d-%s.%s", metadata.startOffset(), metadata.remoteLogSegmentId().id(), suffix);
        return root.resolve(directory).resolve(name);
    }

    @Override
    public Optional<RemoteLogSegmentMetadata.CustomMetadata> copyLogSegmentData(RemoteLogSegmentMetadata metadata, LogSegmentData data)
            throws RemoteStorageException {
        try {
            Files.createDirectories(file(metadata, "log").getParent());
            copy(data.logSegment(), file(metadata, "log"));
            copy(data.offsetIndex(), file(metadata, "index"));
            copy(data.timeIndex(), file(metadata, "timeindex"));
            if (data.transactionIndex().isPresent()) {
                copy(data.transactionIndex().get(), file(metadata, "txnindex"));
            }
            copy(data.producerSnapshotIndex(), file(metadata, "snapshot"));
            ByteBuffer epochs = data.leaderEpochIndex().duplicate();
            byte[] bytes = new byte[epochs.remaining()];
            epochs.get(bytes);
            Files.write(file(metadata, "leader_epoch_checkpoint"), bytes);
            return Optional.empty();
        } catch (IOException e) {
            throw new RemoteStorageException("copying " + metadata.remoteLogSegmentId() + " failed", e);
        }
    }

    private static void copy(Path from, Path to) throws IOException {
        Path partial = to.resolveSibling(to.getFileName() + ".partial");
        Files.copy(from, partial, StandardCopyOption.REPLACE_EXISTING);
        Files.move(partial, to, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition) throws RemoteStorageException {
        return fetchLogSegment(metadata, startPosition, Integer.MAX_VALUE - 1);
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition, int endPosition) throws RemoteStorageException {
        Path path = file(metadata, "log");
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ)) {
            long end = Math.min(channel.size(), (long) endPosition + 1);
            int length = (int) Math.max(0, end - startPosition);
            ByteBuffer buffer = ByteBuffer.allocate(length);
            while (buffer.hasRemaining() && channel.read(buffer, startPosition + buffer.position()) > 0) {
                // read until the range is complete or the file ends
            }
            return new ByteArrayInputStream(buffer.array(), 0, buffer.position());
        } catch (NoSuchFileException e) {
            throw new RemoteResourceNotFoundException(path + " does not exist");
        } catch (IOException e) {
            throw new RemoteStorageException("reading " + path + " failed", e);
        }
    }

    @Override
    public InputStream fetchIndex(RemoteLogSegmentMetadata metadata, IndexType indexType) throws RemoteStorageException {
        String suffix;
        switch (indexType) {
            case OFFSET: suffix = "index"; break;
            case TIMESTAMP: suffix = "timeindex"; break;
            case TRANSACTION: suffix = "txnindex"; break;
            case PRODUCER_SNAPSHOT: suffix = "snapshot"; break;
            case LEADER_EPOCH: suffix = "leader_epoch_checkpoint"; break;
            default: throw new RemoteStorageException("unknown index type " + indexType);
        }
        Path path = file(metadata, suffix);
        try {
            return Channels.newInputStream(FileChannel.open(path, StandardOpenOption.READ));
        } catch (NoSuchFileException e) {
            throw new RemoteResourceNotFoundException(path + " does not exist");
        } catch (IOException e) {
            throw new RemoteStorageException("reading " + path + " failed", e);
        }
    }

    @Override
    public void deleteLogSegmentData(RemoteLogSegmentMetadata metadata) throws RemoteStorageException {
        try {
            for (String suffix : SUFFIXES) {
                Files.deleteIfExists(file(metadata, suffix));
            }
        } catch (IOException e) {
            throw new RemoteStorageException("deleting " + metadata.remoteLogSegmentId() + " failed", e);
        }
    }

    @Override
    public void close() {
    }
}
