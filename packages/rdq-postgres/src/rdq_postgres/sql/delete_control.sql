-- Delete the control of (:queue, :key) if its version is :expected_version: `deleted` 1, or 0
-- (then list_controls.sql tells whether there is one, of another version, or none).
WITH gone AS (
    DELETE FROM {schema}.control
    WHERE queue = :queue::text AND key = :key::text AND version = :expected_version::bigint
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone
