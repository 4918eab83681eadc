-- A new control (expected version 0): version 1, the rate bucket full (no tokens row yet).
INSERT INTO control (
    queue, key, paused, gate, concurrency, rate, per, burst, fair, aging, state, version,
    updated_at
) VALUES (
    :queue, :key, :paused, :gate, :concurrency, :rate, :per, :burst, :fair, :aging, :state, 1,
    :now
)
