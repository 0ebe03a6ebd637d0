"""Stitching a passage's chunks back into the document's own text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scar_core.passages import MIN_TEXT_OVERLAP, stitch


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
