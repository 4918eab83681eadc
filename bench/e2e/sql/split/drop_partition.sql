-- The split layout's TTL purge, second step: the detached partition {partition} dropped.
DROP TABLE {partition}
