"""The end-to-end benchmark: rdq beside PgQueuer and procrastinate (``python -m bench.e2e``)."""
