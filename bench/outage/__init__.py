"""The outage scenario: a dependency down for a while under a backlog (python -m bench.outage)."""
