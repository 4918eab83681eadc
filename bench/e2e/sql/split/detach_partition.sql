-- The split layout's TTL purge, first step: the expired partition {partition} detached
-- without blocking the completions that insert into split.succeeded meanwhile (a plain DROP
-- takes an ACCESS EXCLUSIVE lock on the parent). Two transactions; not in a transaction block.
ALTER TABLE split.succeeded DETACH PARTITION {partition} CONCURRENTLY
