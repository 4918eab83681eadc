-- Forget the worker :id.
DELETE FROM {schema}.worker WHERE id = :id
