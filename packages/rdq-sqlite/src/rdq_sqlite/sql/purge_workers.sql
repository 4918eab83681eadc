DELETE FROM worker WHERE seen_at < :before
