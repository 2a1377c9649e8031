-- An index written by ragstep before accent folding (tokenizer version 1: no 'tokenizer' key in meta), as that
-- version wrote it: `RAGSTEP_EMBEDDER=none ragstep kb create docs`, then `ragstep ingest docs --kb docs` of five one-line
-- files (French, Spanish, German, an English one without accents, a Chinese one), then one search; dumped with
-- Python's sqlite3 iterdump. tests/test_accent_folding.py restores it and opens it with the current code.
BEGIN TRANSACTION;
CREATE TABLE chunks (
    row INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    knowledge_id TEXT NOT NULL,
    knowledge_base_id TEXT NOT NULL,
    tag_id TEXT NOT NULL DEFAULT '',
    chunk_type TEXT NOT NULL,
    chunk_index INTEGER NOT NULL DEFAULT 0,
    enabled INTEGER NOT NULL DEFAULT 1,
    tokens TEXT NOT NULL,
    space TEXT,
    vector BLOB,
    doc TEXT NOT NULL
);
INSERT INTO "chunks" VALUES(1,'5b4d2f2e9d6657f78f0a90c4844a0d3c-0','5b4d2f2e9d6657f78f0a90c4844a0d3c','3ef0f1519c874ac6afcc07eee4d30831','','text',0,1,'cafe menu lists creme brulee naive resume template written without accents',NULL,NULL,'{"id":"5b4d2f2e9d6657f78f0a90c4844a0d3c-0","knowledge_id":"5b4d2f2e9d6657f78f0a90c4844a0d3c","knowledge_base_id":"3ef0f1519c874ac6afcc07eee4d30831","content":"The cafe menu lists a creme brulee and a naive resume template, written without accents.","chunk_index":0,"start_at":0,"end_at":88,"chunk_type":"text","tag_id":"","enabled":true,"knowledge_title":"plain","knowledge_filename":"plain.txt","index_text":null,"parent_id":null,"sub_chunk_ids":[],"metadata":{},"image_info":[]}');
INSERT INTO "chunks" VALUES(2,'77b890784205528ba1dd31b913036881-0','77b890784205528ba1dd31b913036881','3ef0f1519c874ac6afcc07eee4d30831','','text',0,1,'la canción más antigua del archivo se guarda en el índice de la biblioteca',NULL,NULL,'{"id":"77b890784205528ba1dd31b913036881-0","knowledge_id":"77b890784205528ba1dd31b913036881","knowledge_base_id":"3ef0f1519c874ac6afcc07eee4d30831","content":"La canción más antigua del archivo se guarda en el índice de la biblioteca.","chunk_index":0,"start_at":0,"end_at":75,"chunk_type":"text","tag_id":"","enabled":true,"knowledge_title":"cancion","knowledge_filename":"cancion.txt","index_text":null,"parent_id":null,"sub_chunk_ids":[],"metadata":{},"image_info":[]}');
INSERT INTO "chunks" VALUES(3,'061b9047577a594990d06ed7f28cf387-0','061b9047577a594990d06ed7f28cf387','3ef0f1519c874ac6afcc07eee4d30831','','text',0,1,'大熊 熊猫 大熊猫 大熊 熊猫 大熊猫 生活 四川 竹林 里 主要 竹子 为食',NULL,NULL,'{"id":"061b9047577a594990d06ed7f28cf387-0","knowledge_id":"061b9047577a594990d06ed7f28cf387","knowledge_base_id":"3ef0f1519c874ac6afcc07eee4d30831","content":"# 大熊猫\n\n大熊猫生活在四川的竹林里，主要以竹子为食。","chunk_index":0,"start_at":0,"end_at":28,"chunk_type":"text","tag_id":"","enabled":true,"knowledge_title":"panda","knowledge_filename":"panda.md","index_text":null,"parent_id":null,"sub_chunk_ids":[],"metadata":{"context_header":"大熊猫"},"image_info":[]}');
INSERT INTO "chunks" VALUES(4,'ecb700d5082d50d6b33d4445a709ffb2-0','ecb700d5082d50d6b33d4445a709ffb2','3ef0f1519c874ac6afcc07eee4d30831','','text',0,1,'müller frau müller wohnt der schloßstraße und übersetzt bücher über ökologie',NULL,NULL,'{"id":"ecb700d5082d50d6b33d4445a709ffb2-0","knowledge_id":"ecb700d5082d50d6b33d4445a709ffb2","knowledge_base_id":"3ef0f1519c874ac6afcc07eee4d30831","content":"# Müller\n\nFrau Müller wohnt in der Schloßstraße und übersetzt Bücher über Ökologie.","chunk_index":0,"start_at":0,"end_at":83,"chunk_type":"text","tag_id":"","enabled":true,"knowledge_title":"mueller","knowledge_filename":"mueller.md","index_text":null,"parent_id":null,"sub_chunk_ids":[],"metadata":{"context_header":"Müller"},"image_info":[]}');
INSERT INTO "chunks" VALUES(5,'e68a08817d8a570ba1746905e73ea169-0','e68a08817d8a570ba1746905e73ea169','3ef0f1519c874ac6afcc07eee4d30831','','text',0,1,'gestion des répertoires la commande crée les répertoires de données à la première exécution et garde l historique des accès',NULL,NULL,'{"id":"e68a08817d8a570ba1746905e73ea169-0","knowledge_id":"e68a08817d8a570ba1746905e73ea169","knowledge_base_id":"3ef0f1519c874ac6afcc07eee4d30831","content":"# Gestion des répertoires\n\nLa commande crée les répertoires de données à la première exécution et garde l''historique des accès.","chunk_index":0,"start_at":0,"end_at":127,"chunk_type":"text","tag_id":"","enabled":true,"knowledge_title":"repertoires","knowledge_filename":"repertoires.md","index_text":null,"parent_id":null,"sub_chunk_ids":[],"metadata":{"context_header":"Gestion des répertoires"},"image_info":[]}');
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('generation','5');
INSERT INTO "meta" VALUES('format','1');
CREATE INDEX chunks_knowledge ON chunks (knowledge_id, chunk_index);
CREATE INDEX chunks_kb ON chunks (knowledge_base_id);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('chunks',5);
COMMIT;
