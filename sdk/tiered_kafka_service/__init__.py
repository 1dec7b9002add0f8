"""Pieces the agent and the gateway processes share, outside the client SDK (``tiered_kafka``).

- ``support``: settings helpers (``build_settings``, secrets, S3 clients for the services);
- ``processes``: whether a process id is in use.

Importing ``support`` needs the ``agent`` or ``gateway`` extra (pydantic-settings, boto3).
"""
