"""Phase 1's vectors: the embedding backfill and the fetch of one user's vectors.

``embed_missing`` embeds the user's live truths that lack an embedding from the
embedder's model, batch by batch, each in its own short transaction (the only write of
phase 1), written with a binary ``COPY`` (``save_embeddings``). ``load_user_vectors``
reads the user's live embedded truths in one query (pgvector's binary form, streamed
through a server-side cursor) into numpy arrays:
``UserVectors``. No neighbour search and no clustering here: those are in
``exact_search``, ``approximate_search`` and ``clustering``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import ProgrammingError, connection, transaction
from django.db.models import BinaryField, BooleanField, ExpressionWrapper, F, Func, Q

from ...choices import protected_q
from ...conf import app_settings
from ...embeddings import Embedder, check_dimensions
from ...models import EMBEDDING_DIMENSIONS, Truth


@dataclass(frozen=True, kw_only=True)
class UserVectors:
    """One user's live embedded truths in (created_at, id) order.

    ``ids`` (n,) int64 truth ids; ``vectors`` (n, 384) float32, rows scaled to unit
    norm; ``can_seed`` (n,) bool: consolidatable (and after the cursor in an
    incremental pass).
    """

    ids: np.ndarray
    vectors: np.ndarray
    can_seed: np.ndarray

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])


def embed_missing(
    *,
    user_id: int,
    embedder: Embedder,
    batch_size: int | None = None,
    deadline: float | None = None,
    on_batch: Callable[[int, float], None] | None = None,
) -> int:
    """Embed the user's live truths that have no embedding from ``embedder``'s model.

    Texts are taken shortest first, so a batch pads to a similar length, in batches
    of ``batch_size`` (default ``EMBEDDING_BATCH_SIZE``); each batch is written in its
    own short transaction (``save_embeddings``), so a task stopped part way keeps what
    it embedded. The next batch is embedded while this one is written (the write is mostly
    the server's HNSW index insertions; docs/benchmarks.md): ``embedder.embed`` runs on a
    helper thread, so an embedder that reads the database does so on its own connection,
    outside the caller's transaction.
    ``deadline`` (``time.monotonic()`` seconds) stops after the batch under way when it
    passes; ``missing_embeddings`` then tells what is left. ``on_batch(count, seconds)``
    is called after each committed batch (inside its transaction), ``seconds`` being the
    wall clock since the previous batch was committed (their sum is the whole call's).
    Returns how many truths were embedded. Raises ``EmbeddingError`` (nothing of the
    failing batch is written).
    """
    batch_size = batch_size or app_settings.EMBEDDING_BATCH_SIZE
    pending = list(
        Truth.objects.for_user(user_id)
        .missing_embedding(model_name=embedder.model_name)
        .order_by("id")
        .values_list("id", "content")
    )
    pending.sort(key=lambda row: len(row[1]))
    batches = [pending[start : start + batch_size] for start in range(0, len(pending), batch_size)]
    if not batches:
        return 0
    done, began = 0, time.monotonic()
    with ThreadPoolExecutor(1, thread_name_prefix="iris-embed-ahead") as ahead:
        embedding = ahead.submit(embedder.embed, [content for _, content in batches[0]])
        for number, batch in enumerate(batches):
            vectors = embedding.result()
            last = number + 1 == len(batches) or (deadline is not None and time.monotonic() >= deadline)
            if not last:
                embedding = ahead.submit(embedder.embed, [content for _, content in batches[number + 1]])
            with transaction.atomic():
                save_embeddings([pk for pk, _ in batch], vectors, model_name=embedder.model_name)
                if on_batch is not None:
                    on_batch(len(batch), time.monotonic() - began)
            done, began = done + len(batch), time.monotonic()
            if last:
                break
    return done


#: pgvector's binary form of a vector (``vector_send`` writes it, ``vector_recv`` reads it):
#: int16 dimensions, int16 unused, then big-endian float4s.
_VECTOR = np.dtype([("dimensions", ">i2"), ("unused", ">i2"), ("values", ">f4", (EMBEDDING_DIMENSIONS,))])
#: One row of a binary ``COPY`` of (bigint, vector): PostgreSQL's binary copy format (a
#: field count, then each field's length and value, big-endian).
_COPY_ROW = np.dtype([
    ("fields", ">i2"), ("id_length", ">i4"), ("id", ">i8"), ("vector_length", ">i4"), ("vector", _VECTOR),
])
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags 0, no header extension
_COPY_TRAILER = b"\xff\xff"
_STAGING = "pg_temp.iris_consolidation_new_embeddings"
#: PostgreSQL's error code when the role may not create temporary tables.
_INSUFFICIENT_PRIVILEGE = "42501"


def save_embeddings(ids: Sequence[int], vectors: np.ndarray, *, model_name: str) -> None:
    """Store ``vectors`` ((n, 384) float32) as the embeddings from ``model_name`` of the
    truths ``ids`` (n,), in one transaction (the caller's, if any).

    On psycopg 3 the vectors go in binary through ``COPY`` into a temporary table, then one
    ``UPDATE`` takes them from it (emptying it); else, or where the database's role may not
    create temporary tables, ``bulk_update`` (about three times slower: its ``CASE`` of one
    branch per row, each vector formatted as text; docs/benchmarks.md, "Measured constants").
    Raises ``EmbeddingDimensionMismatch`` (or ``EmbeddingError`` for a count other
    than ``len(ids)``) before writing anything.
    """
    check_dimensions(vectors, expected_rows=len(ids), model_name=model_name)
    with transaction.atomic(savepoint=False):  # the staging rows last until the UPDATE
        if is_psycopg3(connection) and _staging_table():
            _copy_embeddings(ids, vectors, model_name=model_name)
            return
        rows = [Truth(id=pk, embedding=vector, embedding_model=model_name)
                for pk, vector in zip(ids, vectors, strict=True)]
        Truth.all_objects.bulk_update(rows, ["embedding", "embedding_model"])


def _staging_table() -> bool:
    """Create this session's staging table if it is not there; False where the role lacks
    the ``TEMPORARY`` privilege (in a savepoint, so the refusal leaves the transaction
    usable). Other errors are raised."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {_STAGING} (id bigint, embedding vector) "
                           "ON COMMIT DELETE ROWS")
    except ProgrammingError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != _INSUFFICIENT_PRIVILEGE:
            raise
        return False
    return True


def _copy_embeddings(ids: Sequence[int], vectors: np.ndarray, *, model_name: str) -> None:
    """The binary ``COPY`` into the staging table and the ``UPDATE`` from it."""
    rows = np.zeros(len(ids), dtype=_COPY_ROW)
    rows["fields"], rows["id_length"], rows["id"] = 2, 8, ids
    rows["vector_length"], rows["vector"]["dimensions"] = _VECTOR.itemsize, EMBEDDING_DIMENSIONS
    rows["vector"]["values"] = vectors
    table, key, embedding, model = (connection.ops.quote_name(name) for name in (
        Truth._meta.db_table, Truth._meta.pk.column, Truth._meta.get_field("embedding").column,
        Truth._meta.get_field("embedding_model").column))
    with connection.cursor() as cursor, connection.wrap_database_errors:
        with cursor.cursor.copy(f"COPY {_STAGING} (id, embedding) FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(_COPY_HEADER + rows.tobytes() + _COPY_TRAILER)
        cursor.execute(
            f"WITH new AS (DELETE FROM {_STAGING} RETURNING id, embedding) "
            f"UPDATE {table} AS truth SET {embedding} = new.embedding, {model} = %s "
            f"FROM new WHERE truth.{key} = new.id",
            [model_name],
        )


def missing_embeddings(*, user_id: int, embedder: Embedder) -> int:
    """How many of the user's live truths still lack an embedding from ``embedder``."""
    return Truth.objects.for_user(user_id).missing_embedding(model_name=embedder.model_name).count()


def load_user_vectors(
    *, user_id: int, max_generation: int, seed_filter: Q | None = None, small: bool = False
) -> UserVectors:
    """Fetch one user's live embedded truths in one query, streamed into numpy arrays
    (``small``: the caller knows the user has at most ``FETCH_ROWS`` live truths, read in
    one round trip instead of a server-side cursor's three).

    Memory: 1,536 bytes per truth for the vectors (on top of ``PHASE1_MEMORY_MB``).
    """
    can_seed = ~protected_q(max_generation=max_generation)
    if seed_filter is not None:
        can_seed &= seed_filter
    rows = (
        Truth.objects.for_user(user_id)
        .with_embedding()
        .annotate(
            can_seed=ExpressionWrapper(can_seed, output_field=BooleanField()),
            raw=binary_embedding(),
        )
        .order_by("created_at", "id")
        .values_list("id", "can_seed", "raw")
    )
    ids: list[int] = []
    seeds: list[bool] = []
    chunks: list[np.ndarray] = []
    for batch in stream_rows(rows, FETCH_ROWS, small=small):
        ids.extend(row[0] for row in batch)
        seeds.extend(bool(row[1]) for row in batch)
        chunks.append(_parse_vectors([row[2] for row in batch]))
    vectors = np.concatenate(chunks) if chunks else np.zeros((0, EMBEDDING_DIMENSIONS), dtype=np.float32)
    del chunks
    return UserVectors(ids=np.asarray(ids, dtype=np.int64), vectors=_unit_rows(vectors),
                       can_seed=np.asarray(seeds, dtype=bool))


def binary_embedding() -> Func:
    """The ``embedding`` column in pgvector's binary form (``_VECTOR``, ``vector_send``),
    as a ``bytea`` expression to annotate a ``Truth`` queryset with: far cheaper to parse
    (``users_vectors``) than its text form. NULL for a truth with no embedding."""
    return Func(F("embedding"), function="vector_send", output_field=BinaryField())


def users_vectors(
    owners: Sequence[int], ids: Sequence[int], raws: Sequence[Any]
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Several small users' embedded truths, read in one query grouped by user (each
    user's rows together, in (created_at, id) order): ``owners``, ``ids`` and ``raws``
    (``binary_embedding``) of each row, as ``{user_id: (ids (n,) int64, vectors (n, 384)
    float32 unit rows)}``; a user with none is left out. Which truths may seed is the
    caller's (``passes.UserPass.user_vectors``). Memory: 1,536 bytes a truth."""
    if not raws:
        return {}
    owner = np.asarray(owners, dtype=np.int64)
    truth = np.asarray(ids, dtype=np.int64)
    unit = _unit_rows(_parse_vectors(raws))
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    ends = np.r_[starts[1:], owner.shape[0]]
    return {int(owner[a]): (truth[a:b], unit[a:b]) for a, b in zip(starts, ends, strict=True)}


def _parse_vectors(raws: Sequence[Any]) -> np.ndarray:
    """pgvector's binary form (``_VECTOR``) of each row: (n, 384) float32."""
    return np.frombuffer(b"".join(bytes(raw) for raw in raws), dtype=_VECTOR)["values"].astype(np.float32)


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` with each row scaled to unit norm, in place."""
    norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))[:, None]
    vectors /= np.clip(norms, 1e-12, None)
    return vectors


#: Rows per fetch of ``load_user_vectors``: 5,000 rows are about 7.7 MB of vectors.
FETCH_ROWS = 5000


def is_psycopg3(connection: Any) -> bool:
    """Whether Django's ``connection`` runs on psycopg 3 (binary reads, ``COPY``); connects."""
    try:
        import psycopg
    except ImportError:
        return False
    connection.ensure_connection()
    return isinstance(connection.connection, psycopg.Connection)


def stream_rows(queryset: Any, size: int, *, small: bool = False) -> Any:
    """The rows of a ``values_list`` queryset, in lists of at most ``size``, read with a
    server-side cursor wrapped by Django (query logging and execute wrappers apply).
    With psycopg 3 the rows come in PostgreSQL's binary format: a ``bytea`` is then read
    as stored, not decoded from hex text (faster than the ORM's iterator: docs/benchmarks.md,
    "Measured constants"); other drivers get Django's chunked cursor."""
    from django.db import connections

    connection = connections[queryset.db]
    sql, params = queryset.query.get_compiler(queryset.db).as_sql()
    if is_psycopg3(connection):
        import psycopg
        from psycopg.pq import Format

        # Django's own named cursor binds parameters on the client, which rules out
        # binary results; this one binds them on the server.
        # A small result needs no server-side cursor (DECLARE, FETCH, CLOSE): a plain
        # cursor binding on the server reads it in one round trip, binary all the same.
        if small:
            raw = psycopg.Cursor(connection.connection)
        else:
            raw = psycopg.ServerCursor(connection.connection, name=f"iris_rows_{id(queryset)}")
        raw.format = Format.BINARY
        wrap = connection.make_debug_cursor if connection.queries_logged else connection.make_cursor
        cursor = wrap(raw)  # type: ignore[arg-type]  # django-stubs: a DB-API cursor, typed as Django's wrapper
    else:
        cursor = connection.chunked_cursor()
    # Inside a transaction, so the cursor need not be WITH HOLD (which copies the whole
    # result at commit); a short batch is the last, so a small user costs no extra FETCH.
    with transaction.atomic(using=queryset.db) if not connection.in_atomic_block else contextlib.nullcontext():
        with cursor:
            cursor.execute(sql, params)
            while batch := cursor.fetchmany(size):
                yield batch
                if len(batch) < size:
                    break
