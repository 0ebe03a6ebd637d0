import scar_langchain

EXPECTED_ALL = [
    "DEFAULT_KEYS",
    "ChunkLinks",
    "ChunkMetadataKeys",
    "DocstoreNeighbors",
    "EmbeddingVectors",
    "FaissStoreVectors",
    "FallbackVectors",
    "FetchedChunks",
    "InMemoryStoreVectors",
    "NeighborSource",
    "NeighborVectorSource",
    "PGVectorChunks",
    "PGVectorStoreVectors",
    "PGVectorTable",
    "SCARRetriever",
    "ScarEmbeddings",
    "SearchHits",
    "VectorSearchSource",
    "VectorStoreNeighbors",
    "default_vector_source",
    "link_chunks",
    "read_links",
]


def test_all_is_pinned() -> None:
    assert sorted(scar_langchain.__all__) == sorted(EXPECTED_ALL)


def test_every_public_name_resolves_and_is_documented() -> None:
    for name in scar_langchain.__all__:
        value = getattr(scar_langchain, name)
        if callable(value):
            assert value.__doc__, f"{name} has no docstring"
