package com.pinterest.kafka.tieredstorage.consumer;

import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.net.URI;
import java.time.Duration;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3AsyncClient;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.S3Configuration;
import software.amazon.nio.spi.s3.S3ClientStore;

/**
 * Reads one partition's offsets [from, to) with Pinterest's {@link TieredStorageConsumer} 1.0.1 in its remote-storage
 * mode ({@code tiered.storage.mode=TIERED_STORAGE_ONLY}: records come from S3 only, the Kafka consumer inside is used
 * for assignment and group offsets) and prints each record on stdout, one line per record, tab-separated:
 *
 * <pre>offset  timestamp  key  value  headers</pre>
 *
 * key and value in lowercase hex ({@code -} for null), headers as {@code hex(name)=hex(value)} joined by {@code ,}
 * (a null header value is {@code hex(name)=-}). Exit 0 once offset {@code to - 1} was printed; 3 (with a message on
 * stderr) when no record came for {@code idle.ms} before that. The last line on stderr is
 * {@code records=N elapsed_ms=T}.
 *
 * <p>Arguments, {@code name=value}: bootstrap, cluster, bucket, prefix, entropy.bits, topic, partition, from, to,
 * endpoint (S3), region (default us-east-1), idle.ms (default 30000), max.poll.records (default 2000), print
 * (default true; false: count the records without printing them, for benchmarks). S3 keys come
 * from the environment, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (never on the command line).
 *
 * <p>The S3 endpoint. ts-consumer reads S3 through three static clients built for AWS ({@code S3Utils} lists,
 * {@code S3OffsetIndexHandler} reads {@code .index} objects, both {@code S3Client.builder().region(US_EAST_1)}) and
 * through aws-java-nio-spi-for-s3 1.1.1 ({@code S3Records} reads {@code .log} objects; its {@code S3ClientStore}
 * builds per-bucket clients against s3.us-east-1.amazonaws.com). None of the three has a configuration key for an
 * endpoint (AWS SDK 2.17 reads none from the environment either), so this harness installs clients for the given
 * endpoint: the first two through ts-consumer's own {@code overrideS3Client} hooks (package-private: this class is in
 * their package), the third into {@code S3ClientStore}'s per-bucket maps by reflection (Pinterest's own tests mock
 * {@code S3Records} instead). Records, offsets, positions and the object layout are all ts-consumer's own code.
 */
public final class TsConsumerHarness {

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private TsConsumerHarness() {
    }

    private static String hex(byte[] bytes) {
        if (bytes == null) {
            return "-";
        }
        char[] out = new char[bytes.length * 2];
        for (int i = 0; i < bytes.length; i++) {
            out[2 * i] = HEX[(bytes[i] >> 4) & 0xf];
            out[2 * i + 1] = HEX[bytes[i] & 0xf];
        }
        return new String(out);
    }

    @SuppressWarnings("unchecked")
    private static <T> void putIntoStore(String fieldName, String bucket, T client) throws ReflectiveOperationException {
        Field field = S3ClientStore.class.getDeclaredField(fieldName);
        field.setAccessible(true);
        ((Map<String, T>) field.get(S3ClientStore.getInstance())).put(bucket, client);
    }

    private static void installS3Clients(String bucket, URI endpoint, Region region) throws ReflectiveOperationException {
        String accessKey = System.getenv("AWS_ACCESS_KEY_ID");
        String secretKey = System.getenv("AWS_SECRET_ACCESS_KEY");
        if (accessKey == null || secretKey == null) {
            throw new IllegalArgumentException("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set");
        }
        StaticCredentialsProvider credentials = StaticCredentialsProvider.create(AwsBasicCredentials.create(accessKey, secretKey));
        S3Configuration pathStyle = S3Configuration.builder().pathStyleAccessEnabled(true).build();
        S3Client sync = S3Client.builder().endpointOverride(endpoint).region(region).credentialsProvider(credentials)
                .serviceConfiguration(pathStyle).build();
        S3AsyncClient async = S3AsyncClient.builder().endpointOverride(endpoint).region(region).credentialsProvider(credentials)
                .serviceConfiguration(pathStyle).build();
        S3Utils.overrideS3Client(sync);
        S3OffsetIndexHandler.overrideS3Client(sync);
        putIntoStore("bucketToClientMap", bucket, sync);
        putIntoStore("bucketToAsyncClientMap", bucket, async);
    }

    public static void main(String[] argv) throws Exception {
        PrintStream out = new PrintStream(new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16), false, "US-ASCII");
        System.setOut(System.err);  // ts-consumer's log4j configurations log to System.out: stdout holds records only
        Map<String, String> args = new HashMap<>();
        for (String arg : argv) {
            int eq = arg.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("argument " + arg + " is not name=value");
            }
            args.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        for (String name : new String[] {"bootstrap", "cluster", "bucket", "prefix", "entropy.bits", "topic", "partition", "from", "to", "endpoint"}) {
            if (!args.containsKey(name)) {
                throw new IllegalArgumentException("missing argument " + name + "=...");
            }
        }
        String bucket = args.get("bucket");
        installS3Clients(bucket, URI.create(args.get("endpoint")), Region.of(args.getOrDefault("region", "us-east-1")));
        TopicPartition partition = new TopicPartition(args.get("topic"), Integer.parseInt(args.get("partition")));
        long from = Long.parseLong(args.get("from"));
        long to = Long.parseLong(args.get("to"));
        long idleMs = Long.parseLong(args.getOrDefault("idle.ms", "30000"));

        Properties props = new Properties();
        props.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.setProperty(ConsumerConfig.GROUP_ID_CONFIG, "ts-consumer-harness-" + UUID.randomUUID());
        props.setProperty(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.setProperty(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.setProperty(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, args.getOrDefault("max.poll.records", "2000"));
        props.setProperty(TieredStorageConsumerConfig.TIERED_STORAGE_MODE_CONFIG, "TIERED_STORAGE_ONLY");
        props.setProperty(TieredStorageConsumerConfig.KAFKA_CLUSTER_ID_CONFIG, args.get("cluster"));
        props.setProperty(TieredStorageConsumerConfig.OFFSET_RESET_CONFIG, "EARLIEST");
        props.setProperty(TieredStorageConsumerConfig.STORAGE_SERVICE_ENDPOINT_S3_BUCKET_CONFIG, bucket);
        props.setProperty(TieredStorageConsumerConfig.STORAGE_SERVICE_ENDPOINT_S3_PREFIX_CONFIG, args.get("prefix"));
        props.setProperty(TieredStorageConsumerConfig.STORAGE_SERVICE_ENDPOINT_S3_PREFIX_ENTROPY_NUM_BITS_CONFIG, args.get("entropy.bits"));

        long started = System.nanoTime();
        long count = 0;
        long next = from;
        boolean print = Boolean.parseBoolean(args.getOrDefault("print", "true"));
        StringBuilder line = new StringBuilder();
        try (TieredStorageConsumer<byte[], byte[]> consumer = new TieredStorageConsumer<>(props)) {
            consumer.assign(Collections.singleton(partition));
            consumer.seek(partition, from);
            long lastProgress = System.nanoTime();
            while (next < to) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> record : records.records(partition)) {
                    if (record.offset() >= to) {
                        break;
                    }
                    count++;
                    next = record.offset() + 1;
                    lastProgress = System.nanoTime();
                    if (!print) {
                        continue;
                    }
                    line.setLength(0);
                    line.append(record.offset()).append('\t').append(record.timestamp()).append('\t')
                            .append(hex(record.key())).append('\t').append(hex(record.value())).append('\t');
                    boolean first = true;
                    for (Header header : record.headers()) {
                        if (!first) {
                            line.append(',');
                        }
                        first = false;
                        line.append(hex(header.key().getBytes(StandardCharsets.UTF_8))).append('=').append(hex(header.value()));
                    }
                    out.println(line);
                }
                if (next < to && System.nanoTime() - lastProgress > idleMs * 1_000_000L) {
                    out.flush();
                    System.err.printf("ts-consumer stalled: no record for %d ms at offset %d of %s (reading [%d, %d))%n", idleMs, next, partition, from, to);
                    System.err.printf("records=%d elapsed_ms=%d%n", count, (System.nanoTime() - started) / 1_000_000L);
                    System.exit(3);
                }
            }
        }
        out.flush();
        System.err.printf("records=%d elapsed_ms=%d%n", count, (System.nanoTime() - started) / 1_000_000L);
        System.exit(0);
    }
}
