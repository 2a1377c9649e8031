"""Keyword tokens of OpenSearch documents indexed before accent folding, brought up to date in place (``ragstep kb
upgrade-tokens``; flavour ``es``).

A document keeps the ``tokens`` it was indexed with. Since tokenizer version 2
(:data:`ragstep.retrieval.text.TOKENIZER_VERSION`) those fold Latin accents; a document indexed before holds
"répertoires" where a query now asks for "repertoires". Queries also send each term's unfolded form
(:func:`ragstep.retrieval.text.keyword_terms`), so such a document still matches a query typed with its accents;
:meth:`OpenSearchTokenUpgrade.upgrade_tokens` makes it match one typed without them, without ingesting it again.

It reads the knowledge base's documents a page at a time (``search_after``, ``tokens`` in ``_source``), folds each
one's tokens as the current tokenizer writes them (:func:`ragstep.adapters.index._tokens.fold_row_tokens`: equal to
tokenizing its text again) and writes back only those that change, one ``_bulk`` of guarded ``update`` actions per
page: a Painless script sets the new tokens only while the stored ones are still those read, so a document a
re-ingest replaced meanwhile is left as it is (``noop``); running it again changes nothing more. Serverless vector
collections have no update by id, so there the documents must be ingested again.

Documentation followed: https://docs.opensearch.org/latest/api-reference/document-apis/update-document/ and
https://docs.opensearch.org/latest/api-reference/document-apis/bulk/ (as :mod:`.backfill`), and
https://docs.opensearch.org/latest/search-plugins/searching-data/paginate/ (``search_after``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ragstep.adapters.index._tokens import fold_row_tokens
from ragstep.adapters.index.opensearch.index import OpenSearchIndex
from ragstep.adapters.index.opensearch.queries import build_filter
from ragstep.adapters.index.opensearch.responses import parse_search_response
from ragstep.errors import InputError, StorageError
from ragstep.ports import SearchFilter

#: Sets the new tokens only while the stored ones are those the new ones were made from.
UPGRADE_SCRIPT = (
    "if (ctx._source.tokens != params.old) { ctx.op = 'noop'; } else { ctx._source.tokens = params.tokens; }"
)
#: Documents per page of the scan (and per ``_bulk`` of updates).
PAGE = 500
RETRY_ON_CONFLICT = 3


class TokenUpgradeResult(NamedTuple):
    """What :meth:`OpenSearchTokenUpgrade.upgrade_tokens` did: documents read, documents whose tokens it rewrote."""

    read: int
    upgraded: int


def tokens_page_query(knowledge_base_id: str, tenant_id: str, size: int, after: Sequence[Any] | None) -> dict[str, Any]:
    """One page of the knowledge base's documents (disabled ones too) with their tokens, in a stable order."""
    flt = SearchFilter(knowledge_base_ids=(knowledge_base_id,), enabled_only=False)
    body: dict[str, Any] = {
        "size": size,
        "query": {"bool": {"filter": build_filter(flt, tenant_id)}},
        "sort": [{"chunk_id": "asc"}, {"version": "asc"}],
        "_source": ["chunk_id", "version", "tokens"],
    }
    if after is not None:
        body["search_after"] = list(after)
    return body


def token_update_action(doc_id: str, old: str, new: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The guarded ``update`` of document ``doc_id`` that replaces the tokens ``old`` with ``new``
    (:data:`UPGRADE_SCRIPT`)."""
    meta = {"_id": doc_id, "retry_on_conflict": RETRY_ON_CONFLICT}
    script = {"source": UPGRADE_SCRIPT, "lang": "painless", "params": {"old": old, "tokens": new}}
    return {"update": meta}, {"script": script}


class OpenSearchTokenUpgrade(OpenSearchIndex):
    """:class:`OpenSearchIndex` that can fold the tokens of documents indexed before folding, in place
    (:class:`ragstep.index_capabilities.TokenUpgrade`; module docstring)."""

    def upgrade_tokens(self, knowledge_base_id: str) -> TokenUpgradeResult:
        if self.flavour != "es":
            raise InputError(
                "OpenSearch Serverless vector collections cannot update a document in place: ingest the knowledge "
                "base's documents again to give them folded keyword tokens"
            )
        read = upgraded = 0
        after: list[Any] | None = None
        what = f"keyword tokens of knowledge base {knowledge_base_id}"
        while True:
            response = self._search(tokens_page_query(knowledge_base_id, self.tenant_id, PAGE, after), what=what)
            hits = parse_search_response(response)
            read += len(hits)
            changes = [
                (h.chunk_id, token_update_action(h.doc_id, old, new))
                for h in hits
                if (new := fold_row_tokens(old := str(h.source.get("tokens") or ""))) != old
            ]
            if changes:
                items = self._bulk([a for _, a in changes], what=what, params=self._write_params())
                # 404: deleted meanwhile; 409: still contended after the retries (running it again picks it up)
                failed = [
                    (cid, i)
                    for (cid, _), i in zip(changes, items, strict=True)
                    if not i.ok and i.status not in (404, 409)
                ]
                if failed:
                    raise StorageError(
                        f"OpenSearch rejected the {what}: {self._describe_failures(failed)}; run it again"
                    )
                upgraded += sum(1 for i in items if i.ok and i.result == "updated")
            after = hits[-1].sort if len(hits) == PAGE else None
            if not after:
                return TokenUpgradeResult(read, upgraded)
