"""Benchmarks of rdq that need more than the package tests: see BENCHMARKS.md."""
