"""``python -m tiered_kafka.cli``: the ``tiered-kafka`` command."""

import sys

from tiered_kafka.cli import main

sys.exit(main())
