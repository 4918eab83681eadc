-- The database clock, by which every due-ness decision is made.
SELECT now() AS now
