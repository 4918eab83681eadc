-- Record migration :version (:name) as applied, in the transaction that applied it.
INSERT INTO {schema}.schema_migrations (version, name) VALUES (:version::integer, :name)
