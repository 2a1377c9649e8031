-- The catalog of an index written by ragstep before accent folding (tokenizer version 1: no 'tokenizer' key in meta), as that
-- version wrote it: `RAGSTEP_EMBEDDER=none ragstep kb create docs`, then `ragstep ingest docs --kb docs` of five one-line
-- files (French, Spanish, German, an English one without accents, a Chinese one), then one search; dumped with
-- Python's sqlite3 iterdump. tests/test_accent_folding.py restores it and opens it with the current code.
BEGIN TRANSACTION;
CREATE TABLE ingestion_jobs (
    id TEXT PRIMARY KEY,
    knowledge_base_id TEXT NOT NULL,
    knowledge_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE TABLE knowledge (
    id TEXT PRIMARY KEY,
    knowledge_base_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    doc TEXT NOT NULL
);
INSERT INTO "knowledge" VALUES('5b4d2f2e9d6657f78f0a90c4844a0d3c','3ef0f1519c874ac6afcc07eee4d30831',1.79579425769124507907e+09,'{"id":"5b4d2f2e9d6657f78f0a90c4844a0d3c","knowledge_base_id":"3ef0f1519c874ac6afcc07eee4d30831","title":"plain","filename":"plain.txt","source_uri":"file:///tmp/foldold/docs/plain.txt","content_hash":"9b1a374c8103a2fd7aedc03c974b54857e87c764621df1859e9e67841bf616ea","status":"completed","chunk_count":1,"tag_id":"","error":"","created_at":1795794257.691245,"updated_at":1795794257.691245,"source_key":"sources/3ef0f1519c874ac6afcc07eee4d30831/5b4d2f2e9d6657f78f0a90c4844a0d3c/9b1a374c8103a2fd7aedc03c974b54857e87c764621df1859e9e67841bf616ea.txt","size":89,"options":{"chunk_size":512,"chunk_overlap":80,"parent_child":false,"parent_size":null},"enabled":true,"disabled_chunks":[],"vectors_pending":""}');
INSERT INTO "knowledge" VALUES('061b9047577a594990d06ed7f28cf387','3ef0f1519c874ac6afcc07eee4d30831',1.79579425771055364606e+09,'{"id":"061b9047577a594990d06ed7f28cf387","knowledge_base_id":"3ef0f1519c874ac6afcc07eee4d30831","title":"panda","filename":"panda.md","source_uri":"file:///tmp/foldold/docs/panda.md","content_hash":"aca35cc04f4db2c1aee933a01788accd44ed2e9a109dae2eff2159caebba9a0b","status":"completed","chunk_count":1,"tag_id":"","error":"","created_at":1795794257.7105536,"updated_at":1795794257.7105536,"source_key":"sources/3ef0f1519c874ac6afcc07eee4d30831/061b9047577a594990d06ed7f28cf387/aca35cc04f4db2c1aee933a01788accd44ed2e9a109dae2eff2159caebba9a0b.md","size":77,"options":{"chunk_size":512,"chunk_overlap":80,"parent_child":false,"parent_size":null},"enabled":true,"disabled_chunks":[],"vectors_pending":""}');
INSERT INTO "knowledge" VALUES('77b890784205528ba1dd31b913036881','3ef0f1519c874ac6afcc07eee4d30831',1.79579425770239186287e+09,'{"id":"77b890784205528ba1dd31b913036881","knowledge_base_id":"3ef0f1519c874ac6afcc07eee4d30831","title":"cancion","filename":"cancion.txt","source_uri":"file:///tmp/foldold/docs/cancion.txt","content_hash":"b4d4357de64783715ecc6cad895fa3cf5e005cc0a46678241019d8aa8b3f62dd","status":"completed","chunk_count":1,"tag_id":"","error":"","created_at":1795794257.7023919,"updated_at":1795794257.7023919,"source_key":"sources/3ef0f1519c874ac6afcc07eee4d30831/77b890784205528ba1dd31b913036881/b4d4357de64783715ecc6cad895fa3cf5e005cc0a46678241019d8aa8b3f62dd.txt","size":79,"options":{"chunk_size":512,"chunk_overlap":80,"parent_child":false,"parent_size":null},"enabled":true,"disabled_chunks":[],"vectors_pending":""}');
INSERT INTO "knowledge" VALUES('ecb700d5082d50d6b33d4445a709ffb2','3ef0f1519c874ac6afcc07eee4d30831',1795794257.72833,'{"id":"ecb700d5082d50d6b33d4445a709ffb2","knowledge_base_id":"3ef0f1519c874ac6afcc07eee4d30831","title":"mueller","filename":"mueller.md","source_uri":"file:///tmp/foldold/docs/mueller.md","content_hash":"6fcc70b1cc7fa600836100ba86a428cdc8e5565be8b91f524d026300c73a6c0a","status":"completed","chunk_count":1,"tag_id":"","error":"","created_at":1795794257.72833,"updated_at":1795794257.72833,"source_key":"sources/3ef0f1519c874ac6afcc07eee4d30831/ecb700d5082d50d6b33d4445a709ffb2/6fcc70b1cc7fa600836100ba86a428cdc8e5565be8b91f524d026300c73a6c0a.md","size":92,"options":{"chunk_size":512,"chunk_overlap":80,"parent_child":false,"parent_size":null},"enabled":true,"disabled_chunks":[],"vectors_pending":""}');
INSERT INTO "knowledge" VALUES('e68a08817d8a570ba1746905e73ea169','3ef0f1519c874ac6afcc07eee4d30831',1.79579425774343705182e+09,'{"id":"e68a08817d8a570ba1746905e73ea169","knowledge_base_id":"3ef0f1519c874ac6afcc07eee4d30831","title":"repertoires","filename":"repertoires.md","source_uri":"file:///tmp/foldold/docs/repertoires.md","content_hash":"556dc911f8d1a603e4159b161e7d7da8f8fce4c6ad3b3df17d75017bb3f6f4db","status":"completed","chunk_count":1,"tag_id":"","error":"","created_at":1795794257.743437,"updated_at":1795794257.743437,"source_key":"sources/3ef0f1519c874ac6afcc07eee4d30831/e68a08817d8a570ba1746905e73ea169/556dc911f8d1a603e4159b161e7d7da8f8fce4c6ad3b3df17d75017bb3f6f4db.md","size":136,"options":{"chunk_size":512,"chunk_overlap":80,"parent_child":false,"parent_size":null},"enabled":true,"disabled_chunks":[],"vectors_pending":""}');
CREATE TABLE knowledge_bases (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    doc TEXT NOT NULL
);
INSERT INTO "knowledge_bases" VALUES('3ef0f1519c874ac6afcc07eee4d30831','docs',1.79579425697109293933e+09,'{"id":"3ef0f1519c874ac6afcc07eee4d30831","name":"docs","type":"document","embedding_model":"none","created_at":1795794256.971093,"description":"","graph":false,"layers":false}');
CREATE INDEX knowledge_by_kb ON knowledge (knowledge_base_id, created_at, id);
CREATE INDEX jobs_by_kb ON ingestion_jobs (knowledge_base_id, created_at, id);
COMMIT;
