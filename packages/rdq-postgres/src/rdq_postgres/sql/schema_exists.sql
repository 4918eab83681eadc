-- Whether the schema has been migrated at all (the Java binding asks before its first
-- operation).
SELECT to_regclass('{schema}.schema_migrations') IS NOT NULL AS migrated
