"""tiered-kafka gateway: the stateless FastAPI service that turns offsets into presigned S3 ranges.

The service is tracked in its own issue; this package is the place it lives.
"""
