"""Statistics: small-sample intervals and tests, the isotonic harm threshold, non-inferiority."""
