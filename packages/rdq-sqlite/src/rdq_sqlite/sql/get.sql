SELECT {columns} FROM task WHERE id = :id
