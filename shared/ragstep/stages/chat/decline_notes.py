"""The note of why the model-free answerer declined (:mod:`ragstep.retrieval.answer_decline`: the answer stage's
trace row's ``decline`` detail), in the question's language: English, Chinese, French, German or Spanish (the
languages of :mod:`ragstep.models.message_language`). :mod:`ragstep.stages.chat.notes` adds it to the answer's notes.
"""

from __future__ import annotations

from ragstep.models.message_language import MessageLanguage

#: Why the model-free answerer declined (:mod:`ragstep.retrieval.answer_decline`), in each message language.
_DECLINE: dict[MessageLanguage, dict[str, str]] = {
    "en": {
        "kind_not_stated": "declined because none of the retrieved sentences states {what}, which the question asks "
        "for",
        "name_not_held": "declined because no retrieved passage mentions {what}",
        "name_not_held_here": "declined because the passage [{passage}] of the closest sentence does not mention "
        "{what}",
        "about_another": 'declined because the closest sentence, in passage [{passage}], is about "{other}", not '
        '"{what}"',
        "under_threshold": "declined because no retrieved sentence is close enough to the question (support "
        '{support:.2f}, needed {threshold:.2f}). The closest passage [{passage}] says: "{sentence}"',
        "few_words": "declined because the retrieved passages share too few of the question's words",
        "few_words_hint": "declined because the retrieved passages share too few of the question's words. The "
        'closest passage [{passage}] says: "{sentence}"',
        "outside_subject": "declined because the closest sentence is outside the documents the conversation is about",
        "no_sentence": "declined because the retrieved passages have no sentence to quote",
        "and": " and ",
        "quote": '"{}"',
        "a_name": "a name the question asks about",
    },
    "zh": {
        "kind_not_stated": "未作答：检索到的句子都没有给出问题所问的{what}",
        "name_not_held": "未作答：检索到的资料都没有提到{what}",
        "name_not_held_here": "未作答：最接近的句子所在的资料 [{passage}] 没有提到{what}",
        "about_another": "未作答：最接近的句子（资料 [{passage}]）说的是“{other}”，不是“{what}”",
        "under_threshold": "未作答：没有与问题足够接近的句子（支持度 {support:.2f}，需要 {threshold:.2f}）。"
        "最接近的资料 [{passage}] 写道：“{sentence}”",
        "few_words": "未作答：检索到的资料与问题共有的词太少",
        "few_words_hint": "未作答：检索到的资料与问题共有的词太少。最接近的资料 [{passage}] 写道：“{sentence}”",
        "outside_subject": "未作答：最接近的句子不在本次对话所涉及的文档中",
        "no_sentence": "未作答：检索到的资料中没有可引用的句子",
        "and": "和",
        "quote": "“{}”",
        "a_name": "问题所问的名称",
    },
    "fr": {
        "kind_not_stated": "pas de réponse : aucune des phrases trouvées n'indique {what}, ce que demande la question",
        "name_not_held": "pas de réponse : aucun passage trouvé ne mentionne {what}",
        "name_not_held_here": "pas de réponse : le passage [{passage}] de la phrase la plus proche ne mentionne pas "
        "{what}",
        "about_another": "pas de réponse : la phrase la plus proche, dans le passage [{passage}], parle de "
        "« {other} », pas de « {what} »",
        "under_threshold": "pas de réponse : aucune phrase trouvée n'est assez proche de la question (support "
        "{support:.2f}, requis {threshold:.2f}). Le passage le plus proche [{passage}] dit : « {sentence} »",
        "few_words": "pas de réponse : les passages trouvés partagent trop peu de mots avec la question",
        "few_words_hint": "pas de réponse : les passages trouvés partagent trop peu de mots avec la question. Le "
        "passage le plus proche [{passage}] dit : « {sentence} »",
        "outside_subject": "pas de réponse : la phrase la plus proche est hors des documents dont parle la "
        "conversation",
        "no_sentence": "pas de réponse : les passages trouvés n'ont aucune phrase à citer",
        "and": " et ",
        "quote": "« {} »",
        "a_name": "un nom sur lequel porte la question",
    },
    "de": {
        "kind_not_stated": "keine Antwort: keiner der gefundenen Sätze nennt {what}, wonach die Frage fragt",
        "name_not_held": "keine Antwort: keine gefundene Stelle erwähnt {what}",
        "name_not_held_here": "keine Antwort: die Stelle [{passage}] des nächstliegenden Satzes erwähnt {what} nicht",
        "about_another": "keine Antwort: der nächstliegende Satz, in Stelle [{passage}], handelt von „{other}“, nicht "
        "von „{what}“",
        "under_threshold": "keine Antwort: kein gefundener Satz liegt nah genug an der Frage (Stützung "
        "{support:.2f}, nötig {threshold:.2f}). Die nächstliegende Stelle [{passage}] sagt: „{sentence}“",
        "few_words": "keine Antwort: die gefundenen Stellen teilen zu wenige Wörter mit der Frage",
        "few_words_hint": "keine Antwort: die gefundenen Stellen teilen zu wenige Wörter mit der Frage. Die "
        "nächstliegende Stelle [{passage}] sagt: „{sentence}“",
        "outside_subject": "keine Antwort: der nächstliegende Satz steht außerhalb der Dokumente, um die es im "
        "Gespräch geht",
        "no_sentence": "keine Antwort: die gefundenen Stellen haben keinen Satz zum Zitieren",
        "and": " und ",
        "quote": "„{}“",
        "a_name": "einen Namen, nach dem die Frage fragt",
    },
    "es": {
        "kind_not_stated": "sin respuesta: ninguna de las frases encontradas indica {what}, que es lo que pregunta la "
        "pregunta",
        "name_not_held": "sin respuesta: ningún pasaje encontrado menciona {what}",
        "name_not_held_here": "sin respuesta: el pasaje [{passage}] de la frase más cercana no menciona {what}",
        "about_another": "sin respuesta: la frase más cercana, en el pasaje [{passage}], trata de «{other}», no de "
        "«{what}»",
        "under_threshold": "sin respuesta: ninguna frase encontrada está lo bastante cerca de la pregunta (apoyo "
        "{support:.2f}, necesario {threshold:.2f}). El pasaje más cercano [{passage}] dice: «{sentence}»",
        "few_words": "sin respuesta: los pasajes encontrados comparten muy pocas palabras con la pregunta",
        "few_words_hint": "sin respuesta: los pasajes encontrados comparten muy pocas palabras con la pregunta. El "
        "pasaje más cercano [{passage}] dice: «{sentence}»",
        "outside_subject": "sin respuesta: la frase más cercana está fuera de los documentos de los que trata la "
        "conversación",
        "no_sentence": "sin respuesta: los pasajes encontrados no tienen ninguna frase que citar",
        "and": " y ",
        "quote": "«{}»",
        "a_name": "un nombre por el que pregunta la pregunta",
    },
}
#: The kinds of value a question asks for (:func:`~ragstep.retrieval.answer_decline.asked_kinds`), as a note names
#: them.
_KINDS: dict[MessageLanguage, dict[str, str]] = {
    "en": {
        "option": "an option",
        "setting": "the name of a setting",
        "author": "who made it (an author, a maintainer, a founder)",
        "ratio": "a ratio or a difference",
        "frequency": "a frequency",
        "time_before": "how long before (a time or a date)",
        "length": "a length",
        "weight": "a weight",
        "duration": "a duration",
        "deadline": "a date or a time limit",
        "year": "a year",
        "date": "a date",
        "number": "a number",
        "default": "a default value",
        "value": "the kind of value",
    },
    "zh": {
        "option": "选项",
        "setting": "配置项的名称",
        "author": "作者或创建者",
        "ratio": "比例或差值",
        "frequency": "频率",
        "time_before": "提前多久（时长或日期）",
        "length": "长度",
        "weight": "重量",
        "duration": "时长",
        "deadline": "日期或期限",
        "year": "年份",
        "date": "日期或时间",
        "number": "数字",
        "default": "默认值",
        "value": "那类值",
    },
    "fr": {
        "option": "une option",
        "setting": "le nom d'un paramètre",
        "author": "qui l'a fait (un auteur, un mainteneur, un fondateur)",
        "ratio": "un rapport ou un écart",
        "frequency": "une fréquence",
        "time_before": "combien de temps avant (une durée ou une date)",
        "length": "une longueur",
        "weight": "un poids",
        "duration": "une durée",
        "deadline": "une date ou un délai",
        "year": "une année",
        "date": "une date",
        "number": "un nombre",
        "default": "une valeur par défaut",
        "value": "le type de valeur",
    },
    "de": {
        "option": "eine Option",
        "setting": "den Namen einer Einstellung",
        "author": "wer es gemacht hat (Autor, Betreuer, Gründer)",
        "ratio": "ein Verhältnis oder einen Unterschied",
        "frequency": "eine Häufigkeit",
        "time_before": "wie lange vorher (eine Dauer oder ein Datum)",
        "length": "eine Länge",
        "weight": "ein Gewicht",
        "duration": "eine Dauer",
        "deadline": "ein Datum oder eine Frist",
        "year": "ein Jahr",
        "date": "ein Datum",
        "number": "eine Zahl",
        "default": "einen Standardwert",
        "value": "die Art von Wert",
    },
    "es": {
        "option": "una opción",
        "setting": "el nombre de un ajuste",
        "author": "quién lo hizo (un autor, un mantenedor, un fundador)",
        "ratio": "una proporción o una diferencia",
        "frequency": "una frecuencia",
        "time_before": "cuánto tiempo antes (una duración o una fecha)",
        "length": "una longitud",
        "weight": "un peso",
        "duration": "una duración",
        "deadline": "una fecha o un plazo",
        "year": "un año",
        "date": "una fecha",
        "number": "un número",
        "default": "un valor predeterminado",
        "value": "el tipo de valor",
    },
}


def decline_note(decline: dict[str, object], language: MessageLanguage) -> str | None:
    """The note of why the model-free answerer declined (a trace row's ``decline`` detail), in ``language`` (English
    for a language without its texts); None for a reason it does not know."""
    key = language if language in _DECLINE else "en"
    text, kinds = _DECLINE[key], _KINDS[key]
    reason = str(decline.get("reason", ""))
    asked = decline.get("what")
    what = [str(w) for w in asked] if isinstance(asked, list) else []

    def listed(items: list[str]) -> str:
        items = [text["quote"].format(w[1:-1]) if w.startswith('"') and w.endswith('"') else w for w in items]
        sep = "、" if key == "zh" else ", "
        return items[0] if len(items) == 1 else sep.join(items[:-1]) + text["and"] + items[-1]

    values = {"passage": decline.get("passage", 0), "sentence": decline.get("sentence", "")}
    if reason == "kind_not_stated":
        return text[reason].format(what=listed([kinds.get(w, w) for w in what] or [kinds["value"]]))
    if reason == "name_not_held":
        names = listed([f'"{w}"' for w in what]) if what else text["a_name"]
        return text["name_not_held_here" if decline.get("anywhere") else reason].format(what=names, **values)
    if reason == "about_another" and len(what) == 2:
        return text[reason].format(what=what[0], other=what[1], **values)
    if reason == "under_threshold":
        support, threshold = decline.get("support", 0.0), decline.get("threshold", 0.0)
        if not isinstance(support, float | int) or not isinstance(threshold, float | int):
            return None
        return text[reason].format(support=support, threshold=threshold, **values)
    if reason == "few_words":
        return text["few_words_hint" if values["sentence"] else reason].format(**values)
    return text.get(reason) if reason in ("outside_subject", "no_sentence") else None
