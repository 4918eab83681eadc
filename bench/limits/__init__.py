"""Limits that hold across the fleet, measured with ``rdq worker`` processes on PostgreSQL:
what a limit that does not bind costs a drain, the most tasks a concurrency limit lets run at
once, and the most starts a rate limit lets through in any second. See BENCHMARKS.md."""
