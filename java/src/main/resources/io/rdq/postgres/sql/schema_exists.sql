-- Whether the schema has been migrated at all.
SELECT to_regclass('{schema}.schema_migrations') IS NOT NULL AS migrated
