-- Write the control of (:queue, :key) if its stored version is :expected_version (0: there is
-- none yet): a row back with the new version (one more) and updated_at = now(), none when the
-- version is not the expected one (nothing changed; list_controls.sql then says what is
-- there). Of racing writers of one version exactly one gets a row: the INSERT conflicts on
-- the primary key, the UPDATE re-checks the version under the row's lock. A change of rate,
-- per or the bucket size (burst, default max(1, rate / 10)) empties bucket_tokens: the bucket
-- starts full again (bucket_at is read only beside bucket_tokens). keep_bucket() (migration
-- 0018): the bucket's sequence made with the rate, made again (full) when it changes like
-- that, dropped without a rate.
WITH inserted AS (
    INSERT INTO {schema}.control AS c (
        queue, key, paused, gate, concurrency, rate, per, burst, fair, aging, state, version,
        updated_at
    )
    SELECT :queue::text, :key::text, :paused::boolean, :gate::bigint, :concurrency::bigint,
           :rate::bigint, :per::double precision, :burst::bigint, :fair::text,
           :aging::double precision, :state::json, 1, now()
    WHERE :expected_version::bigint = 0
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING c.version, c.updated_at
),
updated AS (
    UPDATE {schema}.control AS c
    SET paused = :paused::boolean,
        gate = :gate::bigint,
        concurrency = :concurrency::bigint,
        rate = :rate::bigint,
        per = :per::double precision,
        burst = :burst::bigint,
        fair = :fair::text,
        aging = :aging::double precision,
        state = :state::json,
        version = c.version + 1,
        updated_at = now(),
        -- (the expressions read the row as it was)
        bucket_tokens = CASE WHEN :rate::bigint IS NULL
            OR (c.rate, c.per, coalesce(c.burst, greatest(1, c.rate / 10)))
               IS DISTINCT FROM (:rate::bigint, :per::double precision,
                                 coalesce(:burst::bigint, greatest(1, :rate::bigint / 10)))
            THEN NULL ELSE c.bucket_tokens END
    FROM {schema}.control AS was
    WHERE c.queue = :queue::text AND c.key = :key::text
      AND c.version = :expected_version::bigint AND :expected_version::bigint > 0
      AND was.queue = c.queue AND was.key = c.key
    RETURNING c.version, c.updated_at,
        (was.rate, was.per, coalesce(was.burst, greatest(1, was.rate / 10)))
            IS DISTINCT FROM (c.rate, c.per, coalesce(c.burst, greatest(1, c.rate / 10)))
            AS refill
)
SELECT version, updated_at,
       {schema}.keep_bucket(:queue::text, :key::text, :rate::bigint IS NOT NULL, true) AS rated
FROM inserted
UNION ALL
SELECT version, updated_at,
       {schema}.keep_bucket(:queue::text, :key::text, :rate::bigint IS NOT NULL, refill)
FROM updated
