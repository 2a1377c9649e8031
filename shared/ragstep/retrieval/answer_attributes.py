"""Attributes a question names, and what a sentence stating one holds (:func:`stated_attributes`): a measured
attribute's word or unit (its area, 人口, its price), a value's bound or licence, an exit status, a contact or a code
as one is written, an office asked who holds it (董事长, mayor); asked when, the event's words (its birth, its
founding). The kind of value a question asks for is
:mod:`ragstep.retrieval.answer_types`'."""

from __future__ import annotations

import re

from ragstep.retrieval.answer_types import MAX_QUESTION_CHARS, asks_when, default_field

# Measured attributes a question may name, and what a sentence stating one holds: the attribute's own word or a unit
# only that attribute is measured in. "What is the area of Qinghai Lake?" / "青海湖的面积有多大" is not answered by
# the passage's population, however close in meaning: when the question names the attribute, the sentence (or the
# option or paragraph it belongs to) must state it. General vocabulary of measurement: English, Chinese, French,
# German and Spanish.
_MEASURED: tuple[tuple[str, str], ...] = (
    (
        r"\barea\b|面积|\bsuperficie\b|\bfläche\b|\bárea\b",
        r"\barea\b|面积|占地|square|sq\.?\s|km²|km2|m²|平方|公顷|亩|\bacres?\b|\bhectares?\b|superficie|fläche|área",
    ),
    (
        r"\bpopulation\b|人口|\bbevölkerung\b|\beinwohner|\bpoblación\b|\bhabitantes\b",
        # A number of people is a population where they live ("有居民300人", "住着约300人", "共5000人"), not where
        # they were taken ("绑架了21人").
        r"population|inhabitants|residents|people|人口|居民|万人|(?:住|居|有|共|计|约)[^，。；\d]{0,6}\d[\d,.]*\s*(?:多|余)?人"
        r"|habitants|bevölkerung|einwohner|población"
        r"|habitantes",
    ),
    (
        r"\baltitude\b|\belevation\b|海拔|\baltitud\b",
        r"altitude|elevation|above sea level|海拔|\d\s*(?:m|metres?|meters?|feet|ft)\b|\d\s*米|altitud",
    ),
    (
        r"\bheight\b|高度|身高|\bhauteur\b|\baltura\b",
        # A height in metres without 高 is a person's or a thing's only with a decimal ("1.78米"): "4×50米" is a relay.
        r"height|tall|\bhigh\b|高度|身高|海拔|最高|高约|高达|高\s*\d|\d\s*米高|\d\s*(?:m|cm|metres?|meters?|feet|ft)\b|\d\.\d+\s*米"
        r"|\d\s*(?:厘米|公分)|hauteur|\bhaut"
        r"|altura|\balt[oa]s?\b",
    ),
    # "How deep" / 多深 names the attribute as "depth" does: 120 km of a river's length does not say how deep it is.
    (
        r"\bdepth\b|\bhow\s+deep\b|深度|多深|最深|水深|\bprofondeur\b|\btiefe\b|\bwie\s+tief\b|\bprofundidad\b",
        # 深度 states a depth when a value follows it: "深度旅行" is an in-depth trip.
        r"depth|\bdeep|水深|最深|深度\s*(?:[为约达是有：:]|可达|\d)|深达|深约|深\s*\d|\d\s*米深|profond|\btief|profund",
    ),
    (
        r"\bwidth\b|\bhow\s+wide\b|宽度|多宽|最宽|\blargeur\b|\bbreite\b|\bwie\s+breit\b|\banchura\b",
        r"width|\bwide|宽度|最宽|宽约|宽达|宽\s*\d|\d\s*米宽|\blarge|\bbreit|\banch[oa]",
    ),
    (
        r"\blength\b|长度|全长|\blongueur\b|\blänge\b|\blongitud\b",
        r"length|\blong\b|长度|全长|总长|长约|长达|长\s*\d|\d\s*(?:米|公里|千米)长|longueur|länge|\blang\b|longitud"
        r"|\blarg[oa]s?\b",
    ),
    (
        r"\bfrequenc(?:y|ies)\b|频率|\bfréquence\b|\bfrequenz\b|\bfrecuencia\b",
        r"frequen|\bhz\b|hertz|per\s+second|times\s+(?:a|per)\b|\bevery\b|\beach\b|频率|赫兹|次|fréquence|\bfois\b"
        r"|\bmal\b|veces",
    ),
    (
        r"\bweight\b|体重|重量|\bpoids\b|\bgewicht\b|\bpeso\b",
        r"weigh|\d\s*(?:mg|g|kg|t|lbs?|oz|tons?|tonnes?|pounds?|ounces?|grams?|kilo\w*)\b|重"
        r"|[\d零一二两三四五六七八九十百千万]\s*(?:毫克|克|公斤|千克|斤|吨)|poids|gewicht|peso",
    ),
    (r"\bdiameter\b|直径|\bdiamètre\b|\bdurchmesser\b|\bdiámetro\b", r"diameter|直径|diamètre|durchmesser|diámetro"),
    (
        r"\btemperature\b|温度|气温|\btempérature\b|\btemperatur",
        r"temperature|°|℃|degrees|温|摄氏|华氏|température|temperatur|\bgrad\b|\bgrados?\b",
    ),
    (
        r"\bspeed\b(?!\s+up)|速度|时速|\bvitesse\b|\bgeschwindigkeit\b|\bvelocidad\b",
        r"speed|km/h|mph|速|\bfast\b|vitesse|geschwindigkeit|velocidad|\brapide|\bschnell|\brápid",
    ),
    (
        # coûte / kostet / cuesta: the verb asks the price as the noun does; "how much do I pay / donate" too.
        r"\bprice\b|\bcost\b|价格|票价|费用|售价|多少钱|\bprix\b|\bco[uû]t|\bpreis|\bkost|\bprecio\b|\bcuest[ae]n?\b|\bcost[oe]s?\b"
        r"|\bhow\s+much\b(?=.{0,40}\b(?:pay|paid|donate|donation|charge|charged|spend|fee|fees)\b)",
        # 元 after a numeral: alone it is also an era's first year, "建文元年", or an element, "元素".
        r"price|cost|\$|€|£|¥|dollars?|euros?|yuan|\b(?:usd|eur|gbp|chf|cny|rmb)\b|\bfree\b|\bno\s+charge\b|价|费"
        r"|[\d〇零一二两三四五六七八九十百千万亿]\s*元(?![年素论])|prix|coût|gratuit|preis|kost|precio|gratis",
    ),
    # German "Alter" only as the capitalised noun: English "alter" is a verb.
    (
        r"\bage\b|年龄|岁数|\bâge\b|(?-i:\bAlter\b)|\bedad\b",
        r"\bage\b|\bold\b|年龄|岁|\bâge\b|\balter\b|\bedad\b|\bans\b|\bjahre\b|\baños\b",
    ),
    (
        r"\bvolume\s+of\b|\bcapacity\b|容量|体积|容积|\bcapacité\b|\bkapazität\b|\bfassungsvermögen\b|\bcapacidad\b"
        r"|\bvolumen\b",
        r"volume|capacity|litres?|liters?|容量|体积|容积|升|立方|capacité|kapazität|fassungsvermögen|capacidad",
    ),
)
# Attributes that are no measure but are stated in their own words all the same: a licence (its word, or a licence's
# name), the upper or lower bound of a value (its word, a comparison, a range). "What is the libsodium license?" over
# a README whose sentences point to its documentation, or "What is zstd's maximum compression level?" over sentences
# on compression ratios, read close to the question and answer it in no sentence: the evidence that the sources do
# not answer is that none states the attribute asked for.
_STATED: tuple[tuple[str, str], ...] = (
    (
        r"\blicen[cs]es?\b|许可证|授权协议|开源协议|\blizenz|\blicencias?\b",
        r"licen[cs]|\b(?:L?GPL|AGPL|BSD|MIT|MPL|ISC|CC0|CC-BY|Apache|Artistic|Unlicense|WTFPL)\b"
        r"|public\s+domain|copyright|©|\(c\)|许可|授权|协议|lizenz|domaine\s+public|dominio\s+público|gemeinfrei",
    ),
    (
        r"\bmaxim(?:um|al|ale|ales|aux|o|a|os|as)\b|\bmax\b|最大值|上限|最多(?:能|可以|可)|\bhöchst|\bmaximalen?\b|\bmáxim[oa]s?\b",
        r"max|highest|largest|greatest|biggest|\bat\s+most\b|\bupper\b|\blimit|\bup\s+to\b|\bcap(?:ped)?\b|ceiling"
        r"|<=|≤|\bbetween\b|\d\s*(?:-|–|\.\.|to|through)\s*\d|最大|最多|最高|最长|最久|上限|不超过|以内|höchst|bis\s+zu|grenze"
        r"|jusqu|plafond|hasta|límite|tope|máxim|\bor\s+(?:less|fewer|lower|below|earlier|older)\b|\band\s+below\b",
    ),
    (
        r"\bminim(?:um|al|ale|ales|aux|o|a|os|as)\b|\bmin\b|最小值|下限|最少(?:要|需要)|\bmindest|\bminimalen?\b|\bmínim[oa]s?\b",
        r"min|lowest|smallest|\bleast\b|\blower\b|\blimit|>=|≥|\bbetween\b|\d\s*(?:-|–|\.\.|to|through)\s*\d"
        r"|最小|最少|最低|最短|下限|至少|不低于|mindest|wenigstens|au\s+moins|al\s+menos|límite|mínim"
        # A version or a value and up: "TLSv1.2+", "Python 3.8 or later", "2.6 and above".
        r"|\d\+(?![\d+])|\bor\s+(?:later|newer|higher|above|greater|more)\b|\band\s+(?:above|later|newer|up)\b",
    ),
    # Which version: a version's number ("3.3", "v2", "version 1.4", "Python 3"), or a release named as one
    # ("the latest release"); "you can open fzf in a tmux popup" names the program, not its version.
    (
        # "Which versions are kept?" asks which copies of a file: a program's versions are named ("tmux version",
        # "versions of Windows"), or asked in the singular.
        r"\b(?:which|what)\s+(?:[\w.+-]+\s+){1,2}(?:versions?|releases?)\b"
        r"|\b(?:which|what)\s+(?:version\b|versions\s+of\b|release\b|releases\s+of\b)"
        r"|哪个版本|什么版本|哪一版|\bquelle\s+version\b|\bwelche\s+version\b|\bqu[ée]\s+versi[óo]n\b",
        r"\d+\.\d+|\b[A-Za-z]{2,}v?\d+\b|\bv\d|\b(?:version|release|python|perl|go|java|node|gcc|rust)\s*\d"
        r"|\b(?:latest|current|newest|stable)\b"
        r"|版本?\s*\d|\d\s*版",
    ),
    # A contact or a code is stated as one: an email address ("security@example.org", "junegunn.c AT gmail DOT
    # com"), a web address, a telephone number, an airport's code ("MDG"); "Please do not send us reports over email"
    # gives none.
    (
        r"\be-?mail\s+(?:address|adress)|\b(?:what|which)\s+e-?mail\b|邮箱|电子邮件地址|邮件地址"
        r"|\badresse\s+(?:e-?mail|électronique)|\be-?mail-adresse|\bcorreo\s+electr[óo]nico|\bdirecci[óo]n\s+de\s+correo",
        r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|[\w.+-]+\s*(?:\(at\)|\[at\]|(?-i:\bAT\b))\s*[\w-]+|mailto:",
    ),
    (
        # Asked for: "what is the URL / which website / where is the homepage"; "the files of my website" is not.
        r"\b(?:what|which|where)\b[^?]{0,30}\b(?:url|website|web\s*site|homepage|home\s+page|web\s+address)\b"
        r"|(?:网址|官网|主页)(?:是|在)|\bquel(?:le)?\s+(?:est\s+)?(?:l'|le\s+)?(?:site|url)\b"
        r"|\b(?:welche|wie\s+lautet\s+die)\s+(?:webseite|url)\b|\bcu[áa]l\s+es\s+(?:el|la)\s+(?:sitio|p[áa]gina|url)\b",
        r"https?://|\bwww\.|\b[\w-]+\.(?:com|org|net|io|dev|edu|gov|info|app|cn|de|fr|es)\b|\]\(",
    ),
    (
        r"\b(?:tele)?phone\s+number\b|电话(?:号码)?(?:是|多少)|\bnuméro\s+de\s+téléphone\b|\btelefonnummer\b"
        r"|\bn[úu]mero\s+de\s+tel[ée]fono\b",
        r"\+?\d[\d\s().-]{6,}\d",
    ),
    (r"三字代码|三字码|四字代码|\biata\b|\bicao\b|机场代码|airport\s+code", r"(?-i:\b[A-Z]{3,4}\b)"),
    # A signal, a package, an encoding are named as one ("SIGTERM", "the TERM signal", "install the
    # glibc-static-devel package", "UTF-8"): "When building Valgrind, 'make' fails with this: ... cannot find -lc"
    # names no package, "csv.writer(fileobj [, dialect='excel'])" no encoding.
    (
        r"\b(?:which|what)\s+(?:\w+\s+)?signals?\b|哪个信号|什么信号|\bquel\s+signal\b|\bwelches\s+signal\b|\bqu[ée]\s+señal\b",
        r"(?-i:\bSIG[A-Z0-9]+\b|\b[A-Z]{2,7}\s+signal\b)|\bsignal\s+(?:\d+|(?-i:[A-Z]{2,7})\b)|信号|\bsignal\s+\w+\s+\(\d+\)",
    ),
    (
        r"\b(?:which|what)\s+(?:[\w.+-]+\s+){0,2}packages?\b(?!\s+files?)|哪个软件包|什么软件包|哪些软件包",
        r"\bpackages?\b|\binstall(?:ed|s|ing)?\b|软件包|安装",
    ),
    (
        r"\b(?:which|what)\s+(?:\w+\s+)?(?:encoding|charset|character\s+set)s?\b|(?:什么|哪种|哪个)(?:字符)?编码|编码是",
        r"\bencod|\bcharset|\butf-?\d|\bascii\b|\blatin-?1\b|\biso-?8859|\bcp\d{3,4}\b|\bgbk\b|\bgb2312\b|\bgb18030\b"
        r"|\bbig5\b|\bunicode\b|编码",
    ),
    # A port is stated as its number ("21027/UDP", "listens on :8384", "端口 8080"); "启用默认的smtp邮件服务" names
    # the service, not its port.
    (
        r"\b(?:which|what)\s+(?:[\w.+-]+\s+){0,2}ports?\b|\bport\s+number\b|(?:哪个|哪些|什么|默认)端口|端口号?(?:是|为)?多少"
        r"|\bquel\s+port\b|\bwelche[rn]?\s+port\b|\bqu[ée]\s+puerto\b",
        r"(?<![A-Za-z0-9_.])\d{2,5}(?![A-Za-z0-9_.])",  # "端口为22": a Chinese character is no part of the number
    ),
    # An amount of memory or disk space is stated in a unit of data ("about 2300k", "512 MB", "2G 内存", "5M"):
    # "仅适用于宝塔面板9.2.0及以上版本" states a version.
    (
        r"\bhow\s+much\s+(?:\w+\s+)?(?:memory|ram|disk\s+space|disk|storage|space)\b|多大(?:的)?(?:内存|磁盘|硬盘|空间|存储)"
        r"|(?:内存|磁盘|硬盘|存储)(?:空间)?(?:需要|要|占用?)?多大|多少(?:内存|磁盘|硬盘|存储)",
        r"\d\s*(?:[kmgtp]i?b?(?![a-z])|bytes?\b|字节|兆|千字节)|\b(?:kilo|mega|giga|tera)bytes?\b|\bblock\s+size\b",
    ),
    # An exit status is stated in its own words ("exits with", "Return values:"): "If NUM is zero, grep stops" is none.
    (
        r"\bexit\s+(?:status|code|value)s?\b|\breturn\s+(?:code|value|status)s?\b|\bexits?\s+with\b|退出码|返回值",
        # In its own words, not any form of the verbs: "before exiting" or "return list" states no status.
        r"\bexit(?:s|ed)?\s+(?:status|code|value|with)|\bexit\s*\(|\bstatus\b|\bcodes?\b"
        r"|\breturns?\s+(?:an?\s+|the\s+)?(?:exit\s+|error\s+)?(?:status|code|value|\d|zero|non-?zero|true|false|success|failure)"
        r"|\b(?:success|failure)\b|退出|返回",
    ),
)
# Events a date is asked of, stated in their own words or a life's dates in brackets: "吉尔杭阿是哪一年出生的？" over
# a passage of the years of his offices, or "When did X die?" over the year he took office, is not answered by
# another year of the same person. A birth or a death is also written as the life's span, "（1920年－2000年）",
# "(1920-2000)"; a founding as "since". Read only when the question asks when: asked where someone was born, the
# sentences that say "出生" are close to it whoever they are about, and holding the word says nothing of the place.
_EVENTS: tuple[tuple[str, str], ...] = (
    (
        r"出生|出世|诞生|\bborn\b|\bbirth\b|\bnaissance\b|\bnée?\b|\bgeboren\b|\bnaci(?:ó|o|do|da)\b",
        r"出生|生于|诞生|出世|年\s*生|[（(][^（()）]{0,24}?\d{1,4}\s*年?[^（()）]{0,16}?[－—–~～-]|\bborn\b|\bbirth|\bb\.\s*\d"
        r"|\(\s*(?:c\.\s*)?\d{3,4}\s*[–—-]|naissance|\bnée?\b|geboren|\bgeb\.|\bnaci",
    ),
    (
        # "die" alone is also what a process does: only "died", "death" and "when did ... die".
        r"去世|逝世|过世|\bdied\b|\bdeath\b|\bwhen\s+did\b.{1,60}\bdie\b|\bmort\b|\bdécéd|\bgestorben\b|\bstarb\b|\bmuri(?:ó|o)\b",
        r"去世|逝世|病逝|过世|辞世|卒|殁|身亡|遇害|遇刺|死|驾崩|薨|[－—–~～-]\s*(?:公元前?\s*)?\d{1,4}\s*年?\s*[）)]"
        r"|\bdie[ds]?\b|\bdeath\b|\bdeceased\b|passed\s+away|\bd\.\s*\d|\d{3,4}\s*[–—-]\s*\d{3,4}\s*\)"
        r"|\bmort|décè|\bstarb|gestorben|\btod\b|\bmuri|falleci",
    ),
    (
        r"成立|创立|创办|创建|\bfounded\b|\bestablished\b|\bfondée?\b|\bgegründet\b|\bfundad[oa]\b",
        r"成立|创立|创办|创建|建立|设立|组建|始建|建于|建成|创刊|开业|开办|成军|\bfound|\bestablish|\bformed\b"
        r"|\bcreated\b|\bincorporated\b|\bsince\b|\bfond|gegründet|gründ|\bseit\b|\bfund|\bdesde\b",
    ),
)
# Who holds an office: "长江电力的董事长是谁" / "Who is the mayor of X?" is answered by a sentence naming the office
# ("董事长为...", "Mayor Jane Doe"), not by one about the company. A closed class of offices, each its own attribute.
_OFFICES = (
    ("董事长", "chair(?:man|woman|person)?"),
    ("总裁", "president"),
    ("总经理", "(?:general\\s+)?manager"),
    ("首席执行官|CEO", "chief\\s+executive|ceo"),
    ("主席", "chair(?:man|woman|person)?|president"),
    ("校长", "principal|headmaster|headmistress|rector"),
    ("市长", "mayor"),
    ("省长|州长", "governor"),
    ("总统", "president"),
    ("总理|首相", "prime\\s+minister|premier|chancellor"),
    ("主教练|教练", "coach|manager"),
    ("导演", "director"),
    ("主编|总编辑", "editor"),
    ("院长|所长|会长|社长|馆长|局长|部长|厅长", "director|dean|head|minister"),
)
_OFFICE_KINDS = tuple(
    (
        rf"(?:{zh})(?:是谁|为谁|是哪位|由谁)|谁(?:是|担任|出任)[^？?]{{0,12}}(?:{zh})"
        rf"|\bwho\s+(?:is|was|are|were)\s+(?:the\s+)?(?:current\s+|first\s+|former\s+)?(?:{en})\b",
        rf"{zh}|\b(?:{en})\b",
    )
    for zh, en in _OFFICES
)
ATTRIBUTE_KINDS = tuple(
    (re.compile(a, re.IGNORECASE), re.compile(h, re.IGNORECASE)) for a, h in _MEASURED + _STATED + _OFFICE_KINDS
)
_EVENT_KINDS = tuple((re.compile(a, re.IGNORECASE), re.compile(h, re.IGNORECASE)) for a, h in _EVENTS)


_MEASURED_ASKED = tuple(asks for asks, _ in ATTRIBUTE_KINDS[: len(_MEASURED)])  # compiled once, above


def names_measure(question: str) -> bool:
    """``question`` names a measured attribute (its area, 人口, its price): a count in it is of that measure's unit,
    not of a noun the question names."""
    return any(asks.search(question[:MAX_QUESTION_CHARS]) for asks in _MEASURED_ASKED)


def stated_attributes(question: str) -> list[re.Pattern[str]]:
    """What a sentence must hold for each measured attribute ``question`` names (its area, 人口, its price...): the
    attribute's word or a unit it alone is measured in; asked when, the event's words (its birth, its founding).
    Empty when it names none."""
    question = question[:MAX_QUESTION_CHARS]
    held = [holds for asks, holds in ATTRIBUTE_KINDS if asks.search(question)]
    if asks_when(question):
        held += [holds for asks, holds in _EVENT_KINDS if asks.search(question)]
    return held


# What a default is asked of, in English: "the default print width", "the default value of direnv's log_format",
# "warn_timeout default?", "which theme does mkdocs use by default?" (what "by default" is said of). A sentence
# saying "by default" of something else ("tox does not forward the environment variables ... by default") or a
# setting's description without it does not say that default: the sentence, read with its heading and its context
# (a setting's field is read after the setting's description), holds one of the words the default is of. A
# possessive names the program ("prettier's"), which its passage holds; generic words name no setting. Read as a
# check of what the sentence is about, not as a kind of value it holds: a kind of value also weighs the sentences
# holding it, and "default port" then chose another sentence about ports.
_DEFAULT_OF = re.compile(
    r"\bdefault\s+(?:value\s+|setting\s+)?(?:of|for)\s+(?:the\s+)?(?P<of>[\w.'-]+(?:\s+[\w.'-]+){0,2})"
    r"|\bdefault\s+(?P<named>(?!value\b|setting\b|of\b|for\b)[\w.'-]+(?:\s+[\w.'-]+){0,2})"
    r"|(?P<before>[\w.'-]+)\s+default\s*\??\s*$"
    r"|^\W*(?:what|which)\s+(?P<asked>[\w.'-]+(?:\s+[\w.'-]+){0,2}?)\s+(?:does|do|is|are|will|would|did)\b"
    r".*\bby\s+default\b",
    re.IGNORECASE,
)
_GENERIC_WORDS = (
    "value values setting settings option options number config configuration default defaults one thing "
    "the a an is are was be by do does did in on of for to when if i my it use used uses"
)
_GENERIC = frozenset(_GENERIC_WORDS.split())


def default_words(question: str) -> list[str]:
    """The words what a default ``question`` asks for is the default of (module comment above); empty when it asks
    for none, or only "by default", which names nothing."""
    match = _DEFAULT_OF.search(question[:MAX_QUESTION_CHARS])
    if match is None:
        return []
    words: list[str] = []
    asked = match.group("of") or match.group("named") or match.group("before") or match.group("asked") or ""
    for word in asked.split():
        if word.casefold() in ("and", "or"):
            continue  # "address and port": either
        if word.casefold() in _GENERIC:
            break
        if not word.endswith(("'s", "’s")):
            words.append(word.strip(".'-"))
    return [w for w in words if len(w) > 1]


# What a quote stating a default says: the word (in English, Chinese, French, German, Spanish), a setting's
# assignment ("dklen=None", "maxsize=128"), or what applies when nothing is given ("If no FILE is given, ...",
# "unless --all is set", "otherwise").
_STATES_DEFAULT = re.compile(
    r"default|\w\s*=\s*\S|\bif\s+(?:no|not|none|omitted|unset|absent)\b|\bwhen\s+(?:no|not)\b|\bomitted\b"
    r"|\bunless\b|\botherwise\b|\bimplicit|默认|缺省|预设|未指定|不指定|否则|défaut|standardm(?:ä|ae)(?:ß|ss)ig|standardwert|voreingestellt"
    r"|defecto|predetermin",
    re.IGNORECASE,
)


# A long option written with its argument ("--line-length=N", "[--expression=script]", "--color=auto") is the
# option's usage, not a setting's assignment: its argument is a placeholder or an example.
_METAVARIABLE = re.compile(r"(--[\w-]+)=[^\s\]]+")


def states_default(text: str) -> bool:
    """``text`` states a default: the word, an assignment, or what applies when nothing is given."""
    return _STATES_DEFAULT.search(_METAVARIABLE.sub(r"\1", text)) is not None


# A kind of setting its value says without the word: a port (":8384", "port 22000"), an address ("127.0.0.1:8384",
# "localhost", a URL), a path or a directory ("~/.cache/pypoetry", "/var/lib/x", "%APPDATA%\\x").
_PORT = r"(?:\blocalhost|\b\d{1,3}(?:\.\d{1,3}){3}|\b[a-z][\w-]*(?:\.[\w-]+)+|\]):\d{2,5}\b"
_ADDRESS = r"\b\d{1,3}(?:\.\d{1,3}){3}\b|\blocalhost\b|\[::1?\]|\bhttps?://\S+"
_PATH = r"(?:^|[\s`'\"(])(?:~|\.{1,2}|\$\w+|%\w+%)?[/\\][\w.$%{}-]+(?:[/\\][\w.$%{}-]*)*"
_VALUE_FORMS = {
    "port": _PORT,
    "address": f"{_ADDRESS}|{_PORT}",
    "host": _ADDRESS,
    **dict.fromkeys(("path", "directory", "dir", "folder", "location", "file"), _PATH),
}


# A value a sentence states: a number, a code span or a quoted word, an assignment, a path, an address.
_VALUE = re.compile(rf"\d|`[^`]+`|[\"“'][^\"”'\s]+[\"”']|\w\s*=\s*\S|{_PATH}|{_ADDRESS}")


def states_value(text: str) -> bool:
    """``text`` states a value (a number, a code span, a quoted word, an assignment, a path, an address)."""
    return _VALUE.search(_METAVARIABLE.sub(r"\1", text)) is not None


# A configuration key as written ("csp.sentinel.api.port", "log_format", "keyring.enabled"): dotted or with an
# underscore, a letter first.
_CONFIG_KEY = re.compile(r"(?<![\w.-])[A-Za-z][\w-]+(?:\.[A-Za-z][\w-]*)+(?![\w-])|(?<![\w.-])[A-Za-z]\w*_\w+")


def default_keys(question: str) -> re.Pattern[str] | None:
    """Asked for a default of a configuration key the question writes as configuration does ("不配
    csp.sentinel.api.port 的话默认用哪个端口？"), in any language: what a sentence saying that default holds, the key
    (another key's default, "-Dserver.port=8080", is not it); None otherwise."""
    question = question[:MAX_QUESTION_CHARS]
    keys = [m.group(0) for m in _CONFIG_KEY.finditer(question)] if default_field(question) else []
    return re.compile("|".join(re.escape(k) for k in keys), re.IGNORECASE) if keys else None


def default_subject(question: str) -> re.Pattern[str] | None:
    """What a sentence (read with its heading and context) saying the default ``question`` asks for holds: one of
    :func:`default_words`, as a word; None when it asks for no default."""
    words = default_words(question)
    if not words:
        return None
    forms = [_VALUE_FORMS[w.casefold()] for w in words if w.casefold() in _VALUE_FORMS]
    return re.compile(
        "|".join([rf"(?<![A-Za-z0-9]){re.escape(w)}(?:s|es)?(?![A-Za-z0-9])" for w in words] + forms), re.IGNORECASE
    )
