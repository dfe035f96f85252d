"""Inserting rows of a hot table without the ORM's per-call work: the audit row of every call.

`Model.objects.create` compiles the same INSERT on every call and runs the
save machinery (signals, a savepoint decision, RETURNING the new id), which for
the one durable write of a tool call costs more CPU than the database spends
storing the row. `RowInserter` lets the ORM compile the statement once per
database alias and prepares each row's values with the model's own fields
(`get_default`, `pre_save`, `get_db_prep_save`), so types, JSON encoding and
any column a migration adds stay the ORM's business. It skips building a model
instance (its __init__ alone costs more than preparing the values): the fields
read and write their attributes on a plain object instead. It is for models
without a save() override, signal receivers or fields whose pre_save needs the
instance itself (files), whose callers do not need the new primary key; a test
keeps its rows identical to those `objects.create` writes.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, models, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql import InsertQuery


class _Attributes:
    """What a field's pre_save reads its value from (and auto_now writes to): a row's attributes."""


def _reads_its_attribute(field: models.Field) -> bool:
    """Whether `field.pre_save` only returns the row's attribute (no auto_now, no file to save)."""
    if type(field).pre_save is models.Field.pre_save:
        return True
    return isinstance(field, models.DateField) and not field.auto_now and not field.auto_now_add


def _as_given(field: models.Field) -> type | None:
    """The type whose values `field.get_db_prep_save` returns as they are, so the call can be skipped.

    For a plain text or boolean column (or a foreign key to such a key) a
    value of exactly that type, or None, goes to the database unchanged; any
    other value (a lazy string, a number, a date, JSON) still goes through the
    field. Most of the audit row's preparation time went into these no-op
    calls (a test holds each shortcut to what the field would send).
    """
    target = field.target_field if field.is_relation else field
    for field_class, value_type in _AS_GIVEN:
        if type(target) is field_class:  # exact classes: a subclass may prepare values its own way
            return value_type
    return None


# Integers are not among them: on PostgreSQL Django sends each as its column's own type (Int2, Int4, Int8).
_AS_GIVEN: tuple[tuple[type[models.Field], type], ...] = (
    (models.CharField, str),
    (models.TextField, str),
    (models.BooleanField, bool),
)


def write_ahead(sql: str, params: list[Any], *, using: str = DEFAULT_DB_ALIAS) -> None:
    """A write whose result nobody reads, sent ahead of the answer on Toolgate's PostgreSQL backend.

    config/postgresql's `write_ahead` returns before the row is committed inside
    the API's answer scope, whose exit (before the answer leaves) waits for it;
    elsewhere it waits at once. Another backend runs it as a plain statement.
    """
    connection = connections[using]
    send = getattr(connection, "write_ahead", None)
    if send is not None:
        send(sql, params)
        return
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


class RowInserter:
    def __init__(self, model: type[models.Model]) -> None:
        self._model = model
        meta = model._meta
        self._fields = [f for f in meta.local_concrete_fields if f is not meta.auto_field and not f.generated]
        self._by_keyword = {f.name: f for f in self._fields} | {f.attname: f for f in self._fields}
        # Fields whose value is simply the one given (or the default): no row object needed for them.
        self._plain = [_reads_its_attribute(f) for f in self._fields]
        # The one value type each field hands to the database unchanged (see _as_given).
        self._as_given = [_as_given(f) for f in self._fields]
        self._lock = threading.Lock()
        self._statements: dict[str, str] = {}

    def insert(self, **values: Any) -> None:
        """INSERT one row with these field values (the same keywords `objects.create` takes), sent ahead."""
        using = router.db_for_write(self._model)
        write_ahead(self._statement(using), self._params(values, connections[using]), using=using)

    def prepared(self, **values: Any) -> tuple[tuple[str, ...], list[Any]]:
        """The row's columns and their database values, for a statement of the caller's own (a CTE)."""
        connection = connections[router.db_for_write(self._model)]
        return tuple(field.column for field in self._fields), self._params(values, connection)

    def _params(self, values: dict[str, Any], connection: BaseDatabaseWrapper) -> list[Any]:
        given = self._given(values)
        row: _Attributes | None = None
        params = []
        for field, plain, as_given in zip(self._fields, self._plain, self._as_given, strict=True):
            if plain:
                value = given[field.attname] if field.attname in given else field.get_default()
            else:
                row = row or self._attributes(given)
                value = field.pre_save(row, True)
            if as_given is not None and (value is None or type(value) is as_given):
                params.append(value)
            else:
                params.append(field.get_db_prep_save(value, connection))
        return params

    def _given(self, values: dict[str, Any]) -> dict[str, Any]:
        given = {}
        for keyword, value in values.items():
            field = self._by_keyword.get(keyword)
            if field is None:
                raise TypeError(f"{self._model.__name__} has no field {keyword!r}")
            related_row = keyword == field.name and field.is_relation and isinstance(value, models.Model)
            given[field.attname] = value.pk if related_row else value
        return given

    def _attributes(self, given: dict[str, Any]) -> _Attributes:
        row = _Attributes()
        for field in self._fields:
            setattr(row, field.attname, given[field.attname] if field.attname in given else field.get_default())
        return row

    def _statement(self, using: str) -> str:
        with self._lock:
            if using not in self._statements:
                query = InsertQuery(self._model)
                query.insert_values(self._fields, [self._model()])
                [(sql, _params)] = query.get_compiler(using=using).as_sql()
                self._statements[using] = sql
            return self._statements[using]
