"""What the user should know about how an answer was made, beyond the answer: a stage the question needed that did
not run (a data file not analysed without a generative model, web search that could not be reached), a follow-up
that was searched differently than asked (its note quotes the question as asked and the words added to it, as the
user wrote them), or an answer cut at the length limit. Read from the trace (and the
model's finish reason), so every pipeline and every route says the same; the CLI prints them after the answer, the
``done`` event and ``--json`` carry them as ``notes``.
"""

from __future__ import annotations

from ragstep.models import PipelineState, TraceEvent
from ragstep.models.message_language import MessageLanguage, message_language_of
from ragstep.stages.chat.decline_notes import decline_note

#: The characters of the question a follow-up's note quotes (a longer one is cut).
QUOTE_CHARS = 120

_TEXT: dict[MessageLanguage, dict[str, str]] = {
    "en": {
        "analysis_no_model": "the data files among the sources were not analysed: data analysis needs a generative "
        "chat model (set RAGSTEP_CHAT_PROVIDER)",
        "analysis_no_engine": "the data files among the sources were not analysed: no SQL engine in this deployment",
        "analysis_failed": "data analysis of {file} failed ({reason}); the answer does not use it",
        "web": "web search was skipped ({reason}); the answer uses the knowledge bases only",
        "follow_up": 'searched as a follow-up of the previous question, with: "{question}" + {terms}',
        "rewrite_rejected": "the follow-up could not be rewritten ({reason}); it was searched as asked",
        "rewrite_unused": "the model's rewrite of the follow-up was not used ({reason})",
        "cut": "the answer was cut at the length limit (max_tokens; RAGSTEP_CHAT_MAX_TOKENS by default)",
    },
    "zh": {
        "analysis_no_model": "来源中的数据文件未被分析：数据分析需要生成式对话模型（设置 RAGSTEP_CHAT_PROVIDER）",
        "analysis_no_engine": "来源中的数据文件未被分析：此部署没有 SQL 引擎",
        "analysis_failed": "数据文件 {file} 的分析失败（{reason}），回答未使用它",
        "web": "未进行网络搜索（{reason}），回答只依据知识库",
        "follow_up": "按上一个问题的追问检索：“{question}”，补充了：{terms}",
        "rewrite_rejected": "追问未能改写（{reason}），按原问题检索",
        "rewrite_unused": "模型对追问的改写未被采用（{reason}）",
        "cut": "回答在长度上限处被截断（max_tokens；默认 RAGSTEP_CHAT_MAX_TOKENS）",
    },
    "fr": {
        "analysis_no_model": "les fichiers de données parmi les sources n'ont pas été analysés : l'analyse de "
        "données demande un modèle de conversation génératif (définissez RAGSTEP_CHAT_PROVIDER)",
        "analysis_no_engine": "les fichiers de données parmi les sources n'ont pas été analysés : ce déploiement n'a "
        "pas de moteur SQL",
        "analysis_failed": "l'analyse de données de {file} a échoué ({reason}) ; la réponse ne l'utilise pas",
        "web": "la recherche web n'a pas été faite ({reason}) ; la réponse n'utilise que les bases de connaissances",
        "follow_up": "recherché comme la suite de la question précédente, avec : « {question} » + {terms}",
        "rewrite_rejected": "la question de suite n'a pas pu être reformulée ({reason}) ; elle a été recherchée "
        "telle quelle",
        "rewrite_unused": "la reformulation de la question de suite par le modèle n'a pas été utilisée ({reason})",
        "cut": "la réponse a été coupée à la longueur maximale (max_tokens ; RAGSTEP_CHAT_MAX_TOKENS par défaut)",
    },
    "de": {
        "analysis_no_model": "die Datendateien unter den Quellen wurden nicht analysiert: die Datenanalyse braucht "
        "ein generatives Chat-Modell (RAGSTEP_CHAT_PROVIDER setzen)",
        "analysis_no_engine": "die Datendateien unter den Quellen wurden nicht analysiert: diese Installation hat "
        "keine SQL-Engine",
        "analysis_failed": "die Datenanalyse von {file} ist fehlgeschlagen ({reason}); die Antwort verwendet sie nicht",
        "web": "die Websuche wurde übersprungen ({reason}); die Antwort stützt sich nur auf die Wissensdatenbanken",
        "follow_up": "als Anschlussfrage an die vorige Frage gesucht, mit: „{question}“ + {terms}",
        "rewrite_rejected": "die Anschlussfrage konnte nicht umformuliert werden ({reason}); sie wurde wie gestellt "
        "gesucht",
        "rewrite_unused": "die Umformulierung der Anschlussfrage durch das Modell wurde nicht verwendet ({reason})",
        "cut": "die Antwort wurde an der Längengrenze abgeschnitten (max_tokens; standardmäßig "
        "RAGSTEP_CHAT_MAX_TOKENS)",
    },
    "es": {
        "analysis_no_model": "los archivos de datos entre las fuentes no se analizaron: el análisis de datos necesita "
        "un modelo de chat generativo (defina RAGSTEP_CHAT_PROVIDER)",
        "analysis_no_engine": "los archivos de datos entre las fuentes no se analizaron: este despliegue no tiene "
        "motor SQL",
        "analysis_failed": "el análisis de datos de {file} falló ({reason}); la respuesta no lo usa",
        "web": "se omitió la búsqueda web ({reason}); la respuesta usa solo las bases de conocimiento",
        "follow_up": "buscado como continuación de la pregunta anterior, con: «{question}» + {terms}",
        "rewrite_rejected": "no se pudo reformular la pregunta de seguimiento ({reason}); se buscó tal como se hizo",
        "rewrite_unused": "no se usó la reformulación de la pregunta de seguimiento hecha por el modelo ({reason})",
        "cut": "la respuesta se cortó en el límite de longitud (max_tokens; RAGSTEP_CHAT_MAX_TOKENS por defecto)",
    },
}


def _answered_without(state: PipelineState, knowledge_ids: object) -> bool:
    """The answer cites sources, none of them one of these data files: it did not need their analysis."""
    files = set(knowledge_ids) if isinstance(knowledge_ids, list) else set()
    cited = {r.knowledge_id for r in state.chat.references if r.cited}
    return bool(files) and bool(cited) and not cited & files


def _follow_up(event: TraceEvent, text: dict[str, str], state: PipelineState) -> str:
    """The follow-up's note: the question in the user's own words, and the words added to it from the question it
    leans on, as the user wrote them (a trace of an older version has only the search tokens)."""
    words = event.detail.get("added_words") or event.detail.get("added_terms") or []
    asked = " ".join(str(event.detail.get("original") or state.request.query).split())
    if len(asked) > QUOTE_CHARS:
        asked = asked[: QUOTE_CHARS - 1].rstrip() + "…"
    return text["follow_up"].format(question=asked, terms=" ".join(str(w) for w in words))


def _note(event: TraceEvent, text: dict[str, str], state: PipelineState, language: MessageLanguage) -> str | None:
    if event.stage == "data_analysis":
        if event.action == "skip" and event.reason == "model_not_generative":
            # A data file among the results that the answer did not need ("how should pu-erh be stored?" answered
            # from a text, a price list ranked below it) is not worth a note; one that a declined answer or a
            # cited summary row may have needed is.
            if _answered_without(state, event.detail.get("knowledge_ids")):
                return None
            return text["analysis_no_model"]
        if event.action == "skip" and event.reason == "no_sql_engine":
            return text["analysis_no_engine"]
        if event.action == "degrade":
            file = str(event.detail.get("file") or event.detail.get("name") or "a data file")
            return text["analysis_failed"].format(file=file, reason=event.reason or "error")
    if event.stage in ("chat_completion", "chat_completion_stream") and isinstance(event.detail.get("decline"), dict):
        return decline_note(event.detail["decline"], language)
    if event.action == "degrade" and (event.reason or "").startswith("web search"):
        return text["web"].format(reason=(event.reason or "").removeprefix("web search").lstrip(": "))
    if event.stage == "rewrite_query":
        if event.action == "run" and event.detail.get("method") == "history_terms":
            return _follow_up(event, text, state)
        if event.action == "degrade":
            # Resolved from the conversation's words instead: the follow-up note that comes next says with which.
            unused = event.detail.get("fallback") == "history_terms"
            return text["rewrite_unused" if unused else "rewrite_rejected"].format(reason=event.reason or "error")
    return None


def notes(state: PipelineState) -> list[str]:
    """The notes of an answer, in the question's language, each once, in the order the stages ran."""
    language = message_language_of(state.request.query, state.chat.language)
    text = _TEXT[language]
    out: list[str] = []
    for event in state.trace:
        note = _note(event, text, state, language)
        if note is not None and note not in out:
            out.append(note)
    # A model that stopped at max_tokens (Bedrock says max_tokens): the answer ends mid-way, which the text alone
    # does not tell.
    if state.chat.finish_reason in ("length", "max_tokens"):
        out.append(text["cut"])
    return out
