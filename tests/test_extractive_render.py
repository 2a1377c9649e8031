"""The extractive answer quotes a sentence once, however many passages hold it.

Two manual pages end with the same licence paragraph, and overlapping chunks share sentences: the answer quoted
"Ce programme est un logiciel libre. [1] ... Ce programme est un logiciel libre. [2]" (seen over the French pages
of rm and chmod, and the German ones of cp and ln).
"""

from __future__ import annotations

from ragstep.adapters.chat.extractive import render_quotes
from ragstep.retrieval.answer_span import Quote


def test_a_sentence_two_passages_hold_is_quoted_once_from_the_best() -> None:
    licence = "Licence GPLv3+ : GNU GPL version 3 ou  ultérieure. Ce  programme est un logiciel libre."
    quotes = [
        Quote(passage=2, position=4, text=licence, score=0.9),
        Quote(passage=1, position=7, text=" ".join(licence.split()), score=0.8),  # the same, spaced otherwise
        Quote(passage=1, position=2, text="Par défaut, rm n'efface pas les répertoires.", score=0.7),
    ]
    answer = "".join(render_quotes(quotes, 600, "en"))
    assert answer == f"Par défaut, rm n'efface pas les répertoires. [1] {licence} [2]"
