-- rdq schema version 8: claim_due's plan does not depend on how big the table was.
--
-- claim_due() plans its statement once per connection (version 7, a generic plan). A
-- connection that planned it while the task table was small (a worker started on a new or
-- truncated table) kept a plan that scans the whole table and hashes it to find the few rows
-- it claimed (a Seq Scan under a Hash Join), and every claim paid for every row kept since: on
-- a table of 2,000 rows an idle one-row claim took 2.1 ms against 1.4 ms (BENCHMARKS.md, "The
-- claim's plan on a small table"), until an ANALYZE replanned it. Without sequential scans and
-- hash or merge joins the planner has one plan left for any size: the due scan on the claim
-- indexes and a primary-key lookup per claimed row.
--
-- One ALTER FUNCTION: instant on any task table. See docs/postgres-schema.md.

ALTER FUNCTION {schema}.claim_due(text, bigint, bigint, text)
    SET enable_seqscan = off
    SET enable_hashjoin = off
    SET enable_mergejoin = off;
