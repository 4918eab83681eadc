-- The versions of the migrations applied to the schema (after migrate_prepare.sql).
SELECT version FROM {schema}.schema_migrations
