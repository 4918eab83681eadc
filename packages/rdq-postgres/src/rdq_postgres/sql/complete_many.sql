-- complete for many claims at once: item k is (:ids[k], :tokens[k], attempt :attempts[k], its
-- error type :error_types[k]); each row is fenced on its own token. done lists the ids
-- completed, found the ids that exist, when any id was not done (such an id is StaleClaim if
-- found, else NotFound). The work is complete_claims() (migration 0019: its plan reads one
-- row per item by primary key, whatever the table's statistics).
SELECT c.completed AS done, c.existing AS found
FROM {schema}.complete_claims(
    :ids::text[], :tokens::text[], :attempts::json[], :error_types::text[], NULL
) AS c
