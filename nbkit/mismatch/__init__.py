"""The π − μ mismatch: teacher-forced π, its metrics, sampling filters, token bins and the growth split."""
