"""The compiled part of the package; everything else (metadata, dependencies, packages) is in pyproject.toml.

``tiered_kafka.format._native``: the columnar decoder, the per-record fast path and the consumer's Messages (issue #14), plain C
against the CPython API. ``pip install -e .`` (dev/install.sh, ``make install``) builds it in place.
"""

from setuptools import Extension, setup

NATIVE_SOURCES = [
    "sdk/tiered_kafka/format/_native.c",
    "sdk/tiered_kafka/format/_batch.c",
    "sdk/tiered_kafka/format/_columnar.c",
    "sdk/tiered_kafka/format/_records.c",
    "sdk/tiered_kafka/format/_messages.c",
    "sdk/tiered_kafka/format/_recv.c",
]

setup(
    ext_modules=[
        Extension(
            "tiered_kafka.format._native",
            sources=NATIVE_SOURCES,
            depends=["sdk/tiered_kafka/format/_native.h"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wno-missing-braces"],
        )
    ]
)
