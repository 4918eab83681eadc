-- complete_many when some item discards its task (keep_succeeded = false; complete_many.sql
-- serves batches without one): item k is (:ids[k], :tokens[k], attempt :attempts[k], its
-- error type :error_types[k], :discards[k]); each row is fenced on its own token, and is
-- deleted when its item discards (its dedup row with it: ON DELETE CASCADE), else completed
-- as complete_many.sql completes it. done and found as in complete_many.sql (found is read in
-- the statement's snapshot, where a deleted row still shows: it is only asked about for ids
-- not done). The work is complete_claims() (migration 0019).
SELECT c.completed AS done, c.existing AS found
FROM {schema}.complete_claims(
    :ids::text[], :tokens::text[], :attempts::json[], :error_types::text[], :discards::boolean[]
) AS c
