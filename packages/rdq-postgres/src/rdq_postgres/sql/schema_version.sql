-- The highest applied migration (run only once schema_migrations exists).
SELECT max(version) AS version FROM {schema}.schema_migrations
