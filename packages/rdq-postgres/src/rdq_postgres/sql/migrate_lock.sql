-- Serialise migrations of one schema: a session advisory lock on :key (CRC-32 of
-- "rdq.migrate.<schema>", 31 bits; other migrators wait).
SELECT pg_advisory_lock(:key::bigint)
