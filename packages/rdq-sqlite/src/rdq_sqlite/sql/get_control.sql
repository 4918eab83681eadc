SELECT queue, key, paused, gate, concurrency, rate, per, burst, state, version, updated_at,
    tokens, tokens_at, fair, aging
FROM control
WHERE queue = :queue AND key = :key
