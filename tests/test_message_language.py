"""The fixed texts beside an answer (a decline, the empty response, the notes) read in the question's language:
French, German and Spanish too, not English for every question that is not Chinese.

Asked the way a user does: the official ``openai`` SDK against ``/v1/chat/completions`` of a real server, over a
French manual page, with an elliptical follow-up ("et -r ?") in the conversation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.app.ingest import ingest_file
from ragstep.context import Clients
from ragstep.models import KnowledgeBase
from ragstep.models.message_language import message_language_of
from ragstep.settings import Settings
from ragstep.stages.chat.prompts import EMPTY_RESPONSE
from support.api_server import api_server

openai = pytest.importorskip("openai")

RM = """# rm

rm efface chaque fichier listé. Par défaut, il n'efface pas les répertoires.

-f, --force : ignorer les fichiers inexistants, ne jamais demander de confirmation.

-r, -R, --recursive : enlever le contenu des répertoires récursivement.
"""


@pytest.mark.parametrize(
    ("question", "language"),
    [
        ("Comment supprimer un dossier et tout ce qu'il contient ?", "fr"),
        ("Qu’est-ce que cron ?", "fr"),
        # "de" and "la" are Spanish words too: French's own most common words count for French as well.
        ("Quel code de sortie renvoie timeout quand la commande met trop de temps ?", "fr"),
        ("et -r ?", "fr"),
        ("Wie verhindere ich, dass cp vorhandene Dateien überschreibt?", "de"),
        ("und mit ln?", "de"),
        ("¿Cómo envío la señal KILL a un proceso?", "es"),
        ("¿Quién escribió tar?", "es"),
        ("How do I make rm ask before deleting each file?", "en"),
        ("What does the MIT license allow?", "en"),
        ("Can I use tar con gzip?", "en"),
        ("rm -rf?", "en"),  # nothing but a command: the default
        ("冷启动是怎么回事？", "zh"),
    ],
)
def test_the_language_of_a_question(question: str, language: str) -> None:
    assert message_language_of(question) == language


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("fr")
    clients = Clients(Settings(data_dir=root / "data"))
    ctx = clients.context()
    kb = KnowledgeBase(id=uuid.uuid4().hex, name="manfr", embedding_model="none", created_at=time.time())
    ctx.catalog.create_kb(kb)
    (root / "rm.md").write_text(RM, encoding="utf-8")
    assert ingest_file(root / "rm.md", kb, ctx).status == "indexed"
    with api_server(clients) as url:
        yield url


def ask(base: str, *messages: dict[str, str], stream: bool = False) -> tuple[str, list[str]]:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    history = list(messages)
    if stream:
        chunks = list(client.chat.completions.create(model="ragstep/manfr", messages=history, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        notes = [n for c in chunks if c.choices for n in (c.choices[0].delta.model_extra or {}).get("notes") or []]
        return text, notes
    answer = client.chat.completions.create(model="ragstep/manfr", messages=history)
    message = answer.choices[0].message
    return message.content or "", list((message.model_extra or {}).get("notes") or [])


def test_nothing_found_is_said_in_french(base: str) -> None:
    text, _ = ask(base, {"role": "user", "content": "Quelle capitale australienne ?"})  # no word of the page
    assert text.startswith(EMPTY_RESPONSE["fr"]), text


def test_a_decline_is_said_in_the_questions_language(base: str) -> None:
    # A year is asked for; the page holds none: declined, in German (the document is French: no matter).
    text, _ = ask(base, {"role": "user", "content": "In welchem Jahr wurde rm mit der Option --recursive geschrieben?"})
    assert text.startswith(NO_ANSWER["de"]), text


def test_a_french_follow_up_is_resolved_and_its_note_is_in_french(base: str) -> None:
    first = {"role": "user", "content": "À quoi sert l'option -f de rm ?"}
    answer, _ = ask(base, first)
    text, _ = ask(
        base, first, {"role": "assistant", "content": answer}, {"role": "user", "content": "et -r ?"}, stream=True
    )
    # Whether -r's line is quoted is the answerer's decision (tests/test_answer_span*.py); the search and the note
    # are this: the follow-up searched with the first question's words, and said so in French (a decline, why, in
    # French too).
    notes = text.split("*(note: ")[1:]
    assert notes[0].startswith(
        "recherché comme la suite de la question précédente, avec : « et -r ? » + sert option f rm"
    )
    assert all(n.startswith("pas de réponse") for n in notes[1:]) and "declined" not in text, text
