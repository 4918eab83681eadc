-- Undo enqueue_in.sql's inserts of :ids within the same transaction (after it found an id held
-- by another queue): rows no other transaction can see yet.
DELETE FROM {schema}.task WHERE id = ANY(:ids::text[])
