-- complete_many of the split layout: item k is (:ids[k], :tokens[k], attempt :attempts[k], its
-- error type :error_types[k]), each fenced on its own token as rdq's complete_many.sql is. One
-- statement per batch (in split.complete_many(), schema.sql, planned as claim_due() is): the claimed rows deleted from split.live and inserted into
-- split.succeeded (the partition of now()) with what today's completion leaves on the row
-- (resolution.part: the attempt appended, attempt_count + 1, the error type; the lease
-- columns, NULL on today's SUCCEEDED row, are not kept). done lists the ids completed, found
-- the ids that exist in any table of the layout when some item was not completed.
SELECT * FROM split.complete_many(
    :ids::text[], :tokens::text[], :attempts::json[], :error_types::text[]
)
