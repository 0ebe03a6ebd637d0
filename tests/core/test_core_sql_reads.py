"""pgvector's binary vectors decoded in batches, query vectors encoded, and SQLReads' fallback.

The PostgreSQL side of :class:`~scar_core._sql_reads.SQLReads` (the pooled driver connection) is
tested against a real server in ``tests/postgres/test_pg_sql_reads.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scar_core._sql_reads import (
    PGVECTOR_HEADER_BYTES,
    DriverPool,
    SQLReads,
    VectorParameter,
    decode_pgvector_binary,
)

VECTOR = np.dtype(">f4")
HALFVEC = np.dtype(">f2")


def encode(values: np.ndarray, stored: np.dtype) -> bytes:
    """pgvector's binary form, written independently of the decoder."""
    header = len(values).to_bytes(2, "big") + b"\x00\x00"
    return header + np.asarray(values, dtype=stored).tobytes()


def decode_reference(payload: object, stored: np.dtype) -> np.ndarray | None:
    """One value at a time, the plainest way."""
    if not isinstance(payload, bytes) or len(payload) < PGVECTOR_HEADER_BYTES:
        return None
    dimension = int.from_bytes(payload[:2], "big")
    body = payload[PGVECTOR_HEADER_BYTES:]
    if len(body) != dimension * stored.itemsize:
        return None
    return np.array(
        [
            float(np.frombuffer(body[i : i + stored.itemsize], dtype=stored)[0])
            for i in range(0, len(body), stored.itemsize)
        ]
    )


finite = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, width=32)
vectors = st.lists(finite, min_size=1, max_size=12).map(np.array)


@st.composite
def payloads(draw: st.DrawFn) -> tuple[list[object], np.dtype]:
    stored = draw(st.sampled_from([VECTOR, HALFVEC]))
    same_dimension = draw(st.booleans())
    dimension = draw(st.integers(1, 12))
    values: list[object] = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["vector", "vector", "vector", "none", "truncated", "header"]))
        vector = draw(
            st.lists(finite, min_size=dimension, max_size=dimension).map(np.array)
            if same_dimension
            else vectors
        )
        with np.errstate(over="ignore"):
            payload = encode(vector, stored)
        if kind == "none":
            values.append(None)
        elif kind == "truncated":
            values.append(payload[:-1])
        elif kind == "header":  # the header names another dimension than the body holds
            values.append((len(vector) + 1).to_bytes(2, "big") + payload[2:])
        else:
            values.append(payload)
    return values, stored


@given(payloads(), st.sampled_from([np.float64, np.float32]))
def test_batch_decoding_equals_one_value_at_a_time(
    case: tuple[list[object], np.dtype], wanted: type[np.floating]
) -> None:
    values, stored = case
    decoded = decode_pgvector_binary(values, stored, wanted)
    assert len(decoded) == len(values)
    for value, got in zip(values, decoded, strict=True):
        expected = decode_reference(value, stored)
        if expected is None:
            assert got is None
        else:
            assert got is not None
            assert got.dtype == wanted
            np.testing.assert_array_equal(got, expected.astype(wanted))


def test_a_batch_of_equal_vectors_is_exact_and_independent() -> None:
    rows = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    decoded = decode_pgvector_binary([encode(row, VECTOR) for row in rows], VECTOR, np.float64)
    for row, got in zip(rows, decoded, strict=True):
        assert got is not None
        np.testing.assert_array_equal(got, row.astype(np.float64))
    assert decoded[0] is not None
    decoded[0][0] = 99.0
    assert decoded[1] is not None
    assert decoded[1][0] == rows[1][0]


def test_nothing_to_decode() -> None:
    assert decode_pgvector_binary([], VECTOR, np.float64) == []
    assert decode_pgvector_binary([b""], VECTOR, np.float64) == [None]
    assert decode_pgvector_binary([memoryview(encode(np.ones(2), VECTOR))], VECTOR, np.float32)[
        0
    ].tolist() == [1.0, 1.0]


def test_a_driver_it_does_not_drive_goes_through_sqlalchemy() -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    engine = sqlalchemy.create_engine("sqlite://")  # pysqlite: qmark parameters
    reads = SQLReads(engine)
    statement = sqlalchemy.text("SELECT :word || '%', :number + 1")
    assert reads.rows(statement, {"word": "fifty", "number": 1}) == [("fifty%", 2)]
    assert reads.rows(statement, {"word": "again", "number": 2}) == [("again%", 3)]
    engine.dispose()


float32s = st.floats(allow_nan=False, allow_infinity=False, width=32)


@given(st.lists(float32s, min_size=1, max_size=40).map(lambda v: np.array(v, dtype=np.float32)))
def test_a_query_vector_reads_back_exactly_in_both_forms(values: np.ndarray) -> None:
    parameter = VectorParameter(values)
    from_binary = decode_reference(parameter.binary(), VECTOR)
    assert from_binary is not None
    np.testing.assert_array_equal(from_binary.astype(np.float32), values)
    text = parameter.text()
    assert text[0] == "["
    assert text[-1] == "]"
    # strtof, as pgvector's vector_in reads each number: the nearest float32 to the decimal.
    from_text = np.array([float(number) for number in text[1:-1].split(",")]).astype(np.float32)
    np.testing.assert_array_equal(from_text, values)


def test_a_query_vector_goes_as_text_through_sqlalchemy() -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    engine = sqlalchemy.create_engine("sqlite://")
    reads = SQLReads(engine)
    values = np.array([0.5, -1.25, 3.0], dtype=np.float32)
    rows = reads.rows(sqlalchemy.text("SELECT :query"), {"query": VectorParameter(values)})
    assert rows == [("[0.5,-1.25,3.0]",)]
    engine.dispose()


def test_driver_pool_gives_back_the_slot_of_a_connection_that_failed_to_open() -> None:
    attempts = []

    def refuse() -> object:
        attempts.append(1)
        raise OSError("connection refused")

    pool = DriverPool(refuse, open_limit=1, timeout=0.01)
    for _ in range(3):  # each failure frees its slot, so none waits for the timeout
        with pytest.raises(OSError, match="refused"):
            pool.checkout()
    assert len(attempts) == 3
    assert pool.idle_count() == 0
