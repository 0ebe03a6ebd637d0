"""SCAR for LlamaIndex: a node postprocessor that adds a retrieved node's neighbours when they help.

Install with ``pip install 'scar-retrieval[llamaindex]'``::

    from scar_llamaindex import SCARNodePostprocessor

    scar = SCARNodePostprocessor.from_index(index, filters=None)  # the search is unfiltered
    query_engine = index.as_query_engine(similarity_top_k=5, node_postprocessors=[scar])
"""

from __future__ import annotations

from scar_llamaindex._postprocessor import SCARNodePostprocessor

__all__ = ["SCARNodePostprocessor"]
