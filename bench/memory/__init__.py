"""Worker memory with large payloads in flight (python -m bench.memory)."""
