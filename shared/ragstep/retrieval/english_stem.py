"""One form for an English word's inflections: how the model-free answerer reads a question's word and the
sentence's word as one term (:func:`ragstep.retrieval.answer_terms.stems`).

A question asks in one inflection and the document states in another: "When did it open?" / "The office opened in
2021", "Can I carry them over?" / "days may be carried over", "Can I freeze it?" / "can be frozen". The form is
compared, never shown, so it only has to be the same for a word's inflections:

* the commonest regular endings go ("-s", "-es", "-ed", "-ing" after three letters: "logs" / "log", "opened" /
  "open");
* a "-y" that the ending turned into "-i" comes back ("carried" / "carries" / "carry", "entries" / "entry");
* an irregular verb's past and participle are its base ("frozen" / "froze" / "freeze", "written" / "write",
  "made" / "make", "took" / "take"): the strong and the irregular weak verbs of English grammar, a closed class,
  less the forms that are as often another word ("left", "bound", "ground", "wound", "saw", "rose", "spoke",
  "bit", "bore", "lay", "felt", "fell", "shot", "led", "sat", "lit", "born").

Tried and left out: the rest of the first step of Porter's stemmer ("An algorithm for suffix stripping", 1980) with
the final silent "e" ("file" / "files" / "filed" as one, "processes" / "process", "stopped" / "stop", "used" /
"use"). It joins more true inflections, and through them more sentences that share the question's topic without
answering it: on the development sets of manual pages and Python's documentation it answered unanswerable questions
("What is the largest file bzip2 can compress?" with "bzip2 compresses large files in blocks.") and selected fewer
right sentences (answer-en-stdlib and answer-en-sysdocs 2 fewer answered correctly each).
"""

from __future__ import annotations

import functools
import re

# The commonest regular endings: the plural and third person, the past and the participles.
_SUFFIX = re.compile(r"(?<=[a-z]{3})(?:ing|ed|es|s)$")

# base: its irregular past and participle forms (those that are not the base itself).
_IRREGULAR_VERBS = """
arise arose arisen | awake awoke awoken | beat beaten | become became | begin began begun | bend bent |
bite bitten | bleed bled | blow blew blown | break broke broken | breed bred | bring brought | build built |
burn burnt | buy bought | catch caught | choose chose chosen | cling clung | come came | creep crept | deal dealt |
dig dug | draw drew drawn | dream dreamt | drink drank drunk | drive drove driven | eat ate eaten | fall fallen |
feed fed | fight fought | find found | flee fled | fly flew flown | forbid forbade forbidden | forget forgot
forgotten | forgive forgave forgiven | freeze froze frozen | get got gotten | give gave given | go went gone |
grow grew grown | hang hung | hear heard | hide hid hidden | hold held | keep kept | know knew known | lay laid |
lend lent | lie lain | learn learnt | lose lost | make made | mean meant | meet met | mistake mistook mistaken |
overcome overcame | override overrode overridden | overwrite overwrote overwritten | pay paid | prove proven |
redo redid redone | rewrite rewrote rewritten | ride rode ridden | ring rang rung | rise risen | run ran |
say said | see seen | seek sought | sell sold | send sent | shake shook shaken | shine shone | show shown |
shrink shrank shrunk | sing sang sung | sink sank sunk | sleep slept | slide slid | speak spoken | speed sped |
spell spelt | spend spent | spin spun | spring sprang sprung | stand stood | steal stole stolen | stick stuck |
strike struck | string strung | swear swore sworn | sweep swept | swim swam swum | swing swung | take took taken |
teach taught | tear tore torn | tell told | think thought | throw threw thrown | undergo underwent undergone |
understand understood | undertake undertook undertaken | undo undid undone | wake woke woken | wear wore worn |
weave wove woven | win won | withdraw withdrew withdrawn | withhold withheld | write wrote written
"""
_IRREGULAR = {
    form: words[0] for entry in _IRREGULAR_VERBS.split("|") for words in [entry.split()] for form in words[1:]
}


@functools.lru_cache(maxsize=65536)
def english_stem(word: str) -> str:
    """The one form of ``word``'s inflections (module docstring); ``word`` lower case, accents folded."""
    word = _IRREGULAR.get(word, word)
    if len(word) > 4 and word.endswith(("ied", "ies")):
        return word[:-3] + "y"
    return _SUFFIX.sub("", word)
