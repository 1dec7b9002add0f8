package com.pinterest.kafka.tieredstorage.uploader;

import com.pinterest.kafka.tieredstorage.common.discovery.s3.S3StorageServiceEndpoint;
import com.pinterest.kafka.tieredstorage.common.discovery.s3.S3StorageServiceEndpointProvider;
import java.net.URI;
import java.time.Duration;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.core.client.config.ClientOverrideConfiguration;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3AsyncClient;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.S3Configuration;

/**
 * The two plug-ins Pinterest's ts-segment-uploader 1.0.1 needs from whoever runs it, for a development broker and a
 * non-AWS S3 endpoint (SeaweedFS). Nothing of the uploader's own logic is replaced.
 *
 * <p>{@code -DkafkaEnvironmentProviderClass=com.pinterest.kafka.tieredstorage.uploader.DevKafkaEnvironmentProvider}:
 * the uploader's {@link KafkaEnvironmentProvider} (an interface; the jar ships no implementation), read from system
 * properties: {@code tieredkafka.cluster} (the cluster name of the keyspace, also the name of the uploader's
 * {@code <cluster>.properties}), {@code tieredkafka.broker.id}, {@code tieredkafka.zookeeper.connect},
 * {@code tieredkafka.log.dir}.
 *
 * <p>The S3 endpoint. The uploader builds its clients with {@code S3AsyncClient.builder()} and
 * {@code S3Client.builder()} and no endpoint (MultiThreadedS3FileUploader, S3FileDownloader): AWS SDK 2.17.273 reads
 * no endpoint from the environment or system properties (AWS_ENDPOINT_URL came with 2.20.x), and the uploader has no
 * configuration key for one, so {@link #load()} installs clients for {@code tieredkafka.s3.endpoint} (path-style
 * addressing, region {@code tieredkafka.s3.region}, static keys {@code tieredkafka.s3.access.key} /
 * {@code tieredkafka.s3.secret.key}) through the uploader's own {@code overrideS3Client} hooks, which it calls
 * before it builds either client (KafkaSegmentUploader: {@code environmentProvider.load()} comes first).
 *
 * <p>{@code storage.service.endpoint.provider.class=com.pinterest.kafka.tieredstorage.uploader.DevKafkaEnvironmentProvider$Endpoints}:
 * bucket {@code tieredkafka.s3.bucket} and base prefix {@code tieredkafka.s3.prefix} for every topic (the jar's only
 * provider, MockS3StorageServiceEndpointProvider, reads {@code src/test/resources/<cluster>.json} relative to the
 * working directory).
 */
public final class DevKafkaEnvironmentProvider implements KafkaEnvironmentProvider {

    private String clusterId;
    private Integer brokerId;
    private String zookeeperConnect;
    private String logDir;

    private static String required(String name) {
        String value = System.getProperty(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException("system property " + name + " must be set");
        }
        return value;
    }

    @Override
    public void load() {
        clusterId = required("tieredkafka.cluster");
        brokerId = Integer.valueOf(required("tieredkafka.broker.id"));
        zookeeperConnect = required("tieredkafka.zookeeper.connect");
        logDir = required("tieredkafka.log.dir");
        URI endpoint = URI.create(required("tieredkafka.s3.endpoint"));
        Region region = Region.of(System.getProperty("tieredkafka.s3.region", "us-east-1"));
        StaticCredentialsProvider credentials = StaticCredentialsProvider.create(
                AwsBasicCredentials.create(required("tieredkafka.s3.access.key"), required("tieredkafka.s3.secret.key")));
        S3Configuration pathStyle = S3Configuration.builder().pathStyleAccessEnabled(true).build();
        long timeoutMs = Long.parseLong(System.getProperty("tieredkafka.s3.timeout.ms", "60000"));
        MultiThreadedS3FileUploader.overrideS3Client(S3AsyncClient.builder()
                .endpointOverride(endpoint).region(region).credentialsProvider(credentials).serviceConfiguration(pathStyle)
                .overrideConfiguration(ClientOverrideConfiguration.builder().apiCallTimeout(Duration.ofMillis(timeoutMs)).build())
                .build());
        S3FileDownloader.overrideS3Client(S3Client.builder()
                .endpointOverride(endpoint).region(region).credentialsProvider(credentials).serviceConfiguration(pathStyle)
                .build());
    }

    @Override
    public String clusterId() {
        return clusterId;
    }

    @Override
    public Integer brokerId() {
        return brokerId;
    }

    @Override
    public String zookeeperConnect() {
        return zookeeperConnect;
    }

    @Override
    public String logDir() {
        return logDir;
    }

    /** One bucket and base prefix for every topic, from system properties (class comment). */
    public static final class Endpoints extends S3StorageServiceEndpointProvider {
        private String clusterId;
        private String bucket;
        private String prefix;

        @Override
        public void initialize(String clusterId) {
            this.clusterId = clusterId;
            this.bucket = required("tieredkafka.s3.bucket");
            this.prefix = required("tieredkafka.s3.prefix");
        }

        @Override
        public S3StorageServiceEndpoint.Builder getStorageServiceEndpointBuilderForTopic(String topic) {
            return new S3StorageServiceEndpoint.Builder().setBucket(bucket).setBasePrefix(prefix).setKafkaCluster(clusterId);
        }
    }
}
