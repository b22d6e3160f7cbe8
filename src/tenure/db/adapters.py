"""How Tenure's connections read values back: jsonb decoded from its text once.

psycopg's own jsonb loader hands `json.loads` bytes, whose encoding json then detects: for the
small payloads every claim returns, that doubles the decoding's cost, once per job."""

from __future__ import annotations

import json
from typing import Any

from psycopg import AsyncConnection, Connection
from psycopg.abc import Buffer
from psycopg.adapt import Loader

_decode_json = json.JSONDecoder().decode


class JsonbLoader(Loader):
    def load(self, data: Buffer) -> Any:
        return _decode_json(str(data, "utf-8"))


def use_tenure_adapters(conn: AsyncConnection[Any] | Connection[Any]) -> None:
    conn.adapters.register_loader("jsonb", JsonbLoader)
