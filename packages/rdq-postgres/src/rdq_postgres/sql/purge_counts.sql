-- Delete the counts of the minutes before :before.
DELETE FROM {schema}.counts WHERE minute < :before
