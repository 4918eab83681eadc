DELETE FROM counts WHERE minute < :before
