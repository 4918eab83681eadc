-- The storage clock.
SELECT now() AS now
