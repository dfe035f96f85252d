"""Inserting rows of a hot table without the ORM's per-call work: the audit row of every call.

`Model.objects.create` compiles the same INSERT on every call and runs the
save machinery (signals, a savepoint decision, RETURNING the new id), which for
the one durable write of a tool call costs more CPU than the database spends
storing the row. `RowInserter` lets the ORM compile the statement once per
database alias and prepares each row's values with the model's own fields
(`pre_save`, `get_db_prep_save`), so types, JSON encoding and any column a
migration adds stay the ORM's business. It is for models without a save()
override or signal receivers, whose callers do not need the new primary key;
a test keeps its rows identical to those `objects.create` writes.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import connections, models, router
from django.db.models.sql import InsertQuery


class RowInserter:
    def __init__(self, model: type[models.Model]) -> None:
        self._model = model
        self._lock = threading.Lock()
        self._statements: dict[str, tuple[str, list[models.Field]]] = {}

    def insert(self, **values: Any) -> None:
        """INSERT one row with these field values (the same keywords `objects.create` takes)."""
        row = self._model(**values)
        using = router.db_for_write(self._model)
        connection = connections[using]
        sql, fields = self._statement(using, row)
        params = [field.get_db_prep_save(field.pre_save(row, True), connection) for field in fields]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)

    def _statement(self, using: str, row: models.Model) -> tuple[str, list[models.Field]]:
        with self._lock:
            if using not in self._statements:
                meta = self._model._meta
                fields = [f for f in meta.local_concrete_fields if f is not meta.auto_field and not f.generated]
                query = InsertQuery(self._model)
                query.insert_values(fields, [row])
                [(sql, _params)] = query.get_compiler(using=using).as_sql()
                self._statements[using] = (sql, fields)
            return self._statements[using]
