-- Forget the workers last seen before :seen_before.
DELETE FROM {schema}.worker WHERE seen_at < :seen_before
