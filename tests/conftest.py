pytest_plugins = ["tiered_kafka_dev.services.pytest_plugin"]
