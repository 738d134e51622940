"""What a run records: the metrics registry, the metrics row's schema, run logs read back."""
