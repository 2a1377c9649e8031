"""The ``ingest`` pipeline's stages, parse -> chunk -> embed -> index (declared in :mod:`ragstep.pipeline.definitions`;
in-process through :mod:`ragstep.app.ingest`, one Lambda function each on AWS), and what they share.

* :mod:`.parse`, :mod:`.chunk`, :mod:`.embed`, :mod:`.index`: the stages, each ``run(state, ctx) -> state`` over a
  few-kilobyte :class:`ragstep.models.IngestState`;
* :mod:`.products`: the blob store layout and the (de)serialisation of what the stages hand to each other;
* :mod:`.chunkers`: what a parsed file becomes in the index (text, parent-child, FAQ and data-file chunks);
* :mod:`.dedupe`: ``unchanged`` and ``duplicate`` detection (content-hash markers);
* :mod:`.common`: the knowledge base lookup, accepted file types, size limit.

What a file becomes, by knowledge base type and extension:

* document KB, ``.txt .md .markdown .json .html .htm .pdf .docx``, images, ``.rst .jsonl``, configuration and source
  code (:mod:`ragstep.parsers.source_files`): parsed text -> structure-preserving text chunks (or, with
  ``parent_child``, small child chunks that are indexed and searched, each carrying its parent's text);
* document KB, ``.csv .xlsx``: a ``table_summary`` chunk and one ``table_column`` chunk per column of each sheet;
  the raw file is published to ``data/<kb id>/<knowledge id>/<file name>``, where the data-analysis stage queries it;
* FAQ KB, ``.json .csv``: FAQ entries (formats in :mod:`ragstep.parsers.faq`), one index row per phrasing.
"""
