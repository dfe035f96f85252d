"""Pagination of every /api/v1/ list: `limit` and `offset`, refused when they are not what the schema says.

DRF's LimitOffsetPagination reads `?offset=null` or `?limit=-3` as "use the
default" and clamps a large limit: a client's mistake silently changes what
it gets back. Here a bad value answers 422 naming the parameter, and the
OpenAPI schema states the same bounds.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

_WHOLE_NUMBER = re.compile(r"[0-9]{1,10}")
PAGE_PARAMETERS = ("limit", "offset")


class StrictLimitOffsetPagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 200
    max_offset = 1_000_000_000  # PostgreSQL's OFFSET is a bigint; far beyond any real page

    def get_limit(self, request: Request) -> int:
        return self._whole_number(request, self.limit_query_param, 1, self.max_limit, self.default_limit)

    def get_offset(self, request: Request) -> int:
        return self._whole_number(request, self.offset_query_param, 0, self.max_offset, 0)

    @staticmethod
    def _whole_number(request: Request, name: str, minimum: int, maximum: int, default: int) -> int:
        raw = request.query_params.get(name)
        if raw is None:
            return default
        if not _WHOLE_NUMBER.fullmatch(raw) or not minimum <= int(raw) <= maximum:
            raise ValidationError({name: [f"must be a whole number from {minimum} to {maximum}"]})
        return int(raw)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": self.max_limit, "default": self.default_limit},
            self.offset_query_param: {"minimum": 0, "maximum": self.max_offset, "default": 0},
        }
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"].update(bounds[parameter["name"]])
        return parameters
