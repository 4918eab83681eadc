SELECT queue FROM task WHERE id = :id
