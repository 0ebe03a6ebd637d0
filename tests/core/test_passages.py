"""Stitching a passage's chunks back into the document's own text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scar_core._passages import MIN_TEXT_OVERLAP, stitch


@given(
    text=st.text(alphabet="abc de\n", min_size=1, max_size=200),
    cuts=st.lists(st.integers(0, 200), min_size=1, max_size=6),
    overlap=st.integers(0, 30),
)
def test_overlapping_chunks_with_offsets_give_the_source_span(
    text: str, cuts: list[int], overlap: int
) -> None:
    ends = sorted({min(c, len(text)) for c in cuts} | {len(text)})
    starts, pieces, previous_end = [], [], 0
    for end in ends:
        start = max(previous_end - overlap, 0)
        if end > start:
            starts.append(start)
            pieces.append(text[start:end])
            previous_end = end
    assert stitch(pieces, starts) == text[starts[0] :]


def test_a_paragraph_break_the_splitter_dropped_stays_a_paragraph_break() -> None:
    source = "First paragraph ends here.\n\n    Second one, indented.\nThird line."
    first, second, third = "First paragraph ends here.", "Second one, indented.", "Third line."
    starts = [source.index(first), source.index(second), source.index(third)]
    assert stitch([first, second, third], starts) == (
        "First paragraph ends here.\n\nSecond one, indented.\nThird line."
    )


def test_without_offsets_a_long_repeat_is_taken_as_the_overlap() -> None:
    shared = "x" * MIN_TEXT_OVERLAP
    assert stitch(["abc " + shared, shared + " def"]) == "abc " + shared + " def"
    assert stitch(["abc xyz", "xyz def"]) == "abc xyz\nxyz def"  # too short to be an overlap


def test_offsets_that_restart_on_a_new_page_drop_nothing() -> None:
    # Two PDF pages whose start_index restarts at 0, chained by link_store(order_key="seq").
    page_one = "Page one begins the agreement and ends mid-clause, with the word"
    page_two = "Page two's first sentence must survive. Then the clause continues."
    assert stitch([page_one, page_two], [0, 0]) == page_one + "\n" + page_two
    assert stitch([page_one, page_two], [120, 3]) == page_one + "\n" + page_two


def test_offsets_that_claim_an_overlap_the_texts_do_not_share_are_not_trusted() -> None:
    first, second = "0123456789abcdefghij", "KLMNOPQRSTUVWXYZ"
    # The offsets say the second chunk starts 5 characters before the first ends.
    assert stitch([first, second], [0, 15]) == first + "\n" + second


@given(
    texts=st.lists(st.text(alphabet="ab \n", max_size=40), min_size=1, max_size=6),
    offsets=st.lists(st.one_of(st.none(), st.integers(-5, 80)), min_size=6, max_size=6),
)
def test_every_chunk_is_in_the_passage_whatever_the_offsets(
    texts: list[str], offsets: list[int | None]
) -> None:
    passage = stitch(texts, offsets[: len(texts)])
    assert all(text in passage for text in texts)
    assert len(passage) >= max(len(text) for text in texts)
