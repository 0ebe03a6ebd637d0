"""``scar calibrate``: suggest SCAR's settings for an embedding model from a corpus, no labels."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from scar_core.errors import DataFormatError, ScarError

__all__ = ["read_corpus", "register", "run_calibrate_command"]

_TEXT_SUFFIXES = (".txt", ".md", ".rst")


def read_corpus(path: str | Path) -> dict[str, str]:
    """Read a corpus folder of ``.txt``/``.md``/``.rst`` files (recursively) or a corpus.jsonl.

    A ``corpus.jsonl`` holds one ``{"id": str, "text": str}`` per line.

    Raises:
        DataFormatError: If the path is missing, empty, or a line is malformed.
    """
    location = Path(path)
    if location.is_dir():
        files = sorted(p for p in location.rglob("*") if p.suffix.lower() in _TEXT_SUFFIXES)
        if not files:
            raise DataFormatError(f"{location} holds no {', '.join(_TEXT_SUFFIXES)} files.")
        return {
            str(p.relative_to(location)): p.read_text(encoding="utf-8", errors="replace")
            for p in files
        }
    if location.is_file():
        documents: dict[str, str] = {}
        for number, line in enumerate(location.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFormatError(f"{location}:{number} is not JSON ({exc.msg}).") from exc
            if (
                not isinstance(row, dict)
                or not isinstance(row.get("id"), str)
                or not isinstance(row.get("text"), str)
            ):
                raise DataFormatError(
                    f'{location}:{number} must be an object {{"id": str, "text": str}}.'
                )
            documents[row["id"]] = row["text"]
        if not documents:
            raise DataFormatError(f"{location} has no documents.")
        return documents
    raise DataFormatError(
        f"{location} does not exist; give a folder of text files or corpus.jsonl."
    )


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``calibrate`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "calibrate",
        help="suggest SCAR's settings for an embedding model from your corpus (no labels)",
        description=(
            "Chunk and embed a corpus, measure how strongly the model marks continuity between "
            "adjacent chunks, and suggest the continuity bonus of budgeted SCAR (and lambda and "
            "gamma for plain SCAR). Method: scar_core.calibrate."
        ),
    )
    parser.add_argument("corpus", help="a folder of .txt/.md/.rst files, or corpus.jsonl")
    parser.add_argument("--model", default=None, help="embedding model (as for scar eval)")
    parser.add_argument("--chunk-size", type=int, default=500, help="characters (default 500)")
    parser.add_argument("--chunk-overlap", type=int, default=0, help="characters (default 0)")
    parser.add_argument("--cache-dir", default=None, help="vector cache folder (as for scar eval)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run_calibrate_command)
    return parser


def run_calibrate_command(args: argparse.Namespace) -> int:
    """Run ``scar calibrate``; print the suggestion; return the exit status."""
    from scar_core.calibrate import calibrate
    from scar_core.eval.chunking import chunk_corpus
    from scar_core.eval.retrieval import default_cache_path, embed_chunks, embedder_for

    try:
        documents = read_corpus(args.corpus)
        corpus = chunk_corpus(
            documents, chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap
        )
        cache = Path(args.cache_dir) / "vectors.sqlite" if args.cache_dir else default_cache_path()
        cache.parent.mkdir(parents=True, exist_ok=True)
        embedder = embedder_for(args.model, cache_path=cache)
        matrix = embed_chunks(embedder, corpus.texts, show_progress=not args.no_progress)
        by_document = {
            document_id: matrix[first:last]
            for document_id, (first, last) in corpus.rows_of_document.items()
        }
        result = calibrate(by_document, model_name=embedder.model_name)
    except ScarError as exc:
        print(f"scar calibrate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    print(f"model: {result.model_name}")
    print(f"corpus: {result.documents} documents, {result.chunks} chunks")
    print(
        f"adjacent-chunk cosine {result.adjacent_cosine:.3f}, same-document background "
        f"{result.background_cosine:.3f}: continuity signal {result.continuity_signal:.3f}"
    )
    print("suggested settings:")
    print(f"  budgeted SCAR: continuity_bonus={result.continuity_bonus}, lambda_={result.lambda_}")
    print(f"  plain SCAR:    gamma={result.gamma}, lambda_={result.lambda_} (derived, see docs)")
    return 0
