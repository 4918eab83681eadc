-- Compare-and-set on the version. :refill (a new rate, period or bucket size) empties the
-- stored bucket, so it starts full.
UPDATE control SET
    paused = :paused,
    gate = :gate,
    concurrency = :concurrency,
    rate = :rate,
    per = :per,
    burst = :burst,
    fair = :fair,
    aging = :aging,
    state = :state,
    version = version + 1,
    updated_at = :now,
    tokens = CASE WHEN :refill THEN NULL ELSE tokens END,
    tokens_at = CASE WHEN :refill THEN NULL ELSE tokens_at END
WHERE queue = :queue AND key = :key AND version = :expected
