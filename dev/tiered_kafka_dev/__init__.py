"""Development and local-run tooling for tiered-kafka, never production."""
