DELETE FROM worker WHERE id = :id
