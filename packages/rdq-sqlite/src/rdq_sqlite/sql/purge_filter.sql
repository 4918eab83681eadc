DELETE FROM task WHERE queue = :queue AND status = 'DEAD' AND {filter}
