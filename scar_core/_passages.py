"""Stitch a passage's chunk texts into one text, without repeating the splitter's overlap."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

#: Shorter repeats between two chunks are taken as chance, not as the splitter's overlap.
MIN_TEXT_OVERLAP = 16
#: What joins two chunks the splitter separated by 1, or 2 and more, whitespace characters.
_GAPS = {1: "\n", 2: "\n\n"}


def text_overlap(previous: str, current: str) -> int:
    """Return the length of the longest suffix of ``previous`` that begins ``current``, or 0.

    Only overlaps of at least :data:`MIN_TEXT_OVERLAP` characters count.
    """
    longest = min(len(previous), len(current))
    if longest < MIN_TEXT_OVERLAP:
        return 0
    probe = current[:MIN_TEXT_OVERLAP]
    start = len(previous) - longest
    # The earliest place where previous repeats current's opening is the longest overlap.
    while (found := previous.find(probe, start)) >= 0:
        if current.startswith(previous[found:]):
            return len(previous) - found
        start = found + 1
    return 0


def stitch(texts: Sequence[str], starts: Sequence[int | None] | None = None) -> str:
    """Join the texts of adjacent chunks, in document order, into one passage text.

    Stitching never drops text it has not seen twice: it removes only an overlap verified in
    the texts themselves, so every character of every chunk is in the passage.

    Args:
        texts: The chunk texts, in document order.
        starts: Each chunk's character offset in its document (LangChain's ``start_index``),
            when known. Where two offsets say the chunks overlap and the texts agree there, the
            overlap is dropped exactly; offsets that contradict the texts (that go backwards,
            as page offsets that restart do, or claim an overlap the texts do not share) are
            ignored for that pair. Otherwise a repeated suffix/prefix of at least
            :data:`MIN_TEXT_OVERLAP` characters is taken as the overlap.

    Returns:
        The passage text. Chunks that do not overlap are joined with a line break; where the
        offsets show that the splitter dropped two or more characters between them (the
        whitespace of a paragraph break), with a blank line, so paragraphs stay paragraphs.
    """
    if not texts:
        return ""
    offsets = list(starts) if starts is not None else [None] * len(texts)
    passage = texts[0]
    for (before, start_before), (text, start) in itertools.pairwise(
        zip(texts, offsets, strict=True)
    ):
        trimmed, joiner = None, ""
        if start_before is not None and start is not None and start >= start_before:
            end_before = start_before + len(before)
            claimed = min(max(end_before - start, 0), len(text))
            if passage.endswith(text[:claimed]):  # the offsets agree with the texts
                trimmed = claimed
                gap = start - end_before
                joiner = "" if claimed or gap <= 0 else _GAPS[min(gap, 2)]
        if trimmed is None:
            trimmed = text_overlap(passage, text)
            joiner = "" if trimmed else "\n"
        passage += joiner + text[trimmed:]
    return passage
