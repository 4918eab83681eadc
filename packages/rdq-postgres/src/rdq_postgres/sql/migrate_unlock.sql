-- Release migrate_lock.sql's lock on :key.
SELECT pg_advisory_unlock(:key::bigint)
