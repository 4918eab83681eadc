-- Delete the control of (:queue, :key) if its version is :expected_version: `deleted` 1, or 0
-- (then list_controls.sql tells whether there is one, of another version, or none); the
-- control's bucket sequence goes with it (keep_bucket(), migration 0018).
WITH gone AS (
    DELETE FROM {schema}.control
    WHERE queue = :queue::text AND key = :key::text AND version = :expected_version::bigint
    RETURNING 1
)
SELECT count(*) AS deleted,
       bool_or({schema}.keep_bucket(:queue::text, :key::text, false, false)) AS rated
FROM gone
