"""What a question asks for: the words to look for inside "Where does someone say …?".

People type questions into a search box and the agent passes them on: "Where does someone say workers of
the world unite?", "Wo kommt ein Papagei vor?", "만국의 노동자여 단결하라는 말은 어디에 나오나요?". The frame
(where, who says, in which video, 어디에 나오나요) is no part of what was said or shown, and it weighs on the
dense vector: e5 puts the Korean question below the cross-language line against "Workers of the World
United." while the bare phrase is found at once. So the searcher looks for the sought phrase alone
(`sought`), and nothing else: judged with its frame, a question about something the archive lacks met
unrelated speech ("Is there a recording about baking sourdough bread?" and "This is an example video").

Only a frame that is plainly one is taken off: a quoted phrase, the part after a question's colon, and the
common frames of English, German and Korean questions about where something is said or seen (and of
requests: "Find the part where …", "Zeig mir die Stelle, wo …", "… 장면을 보여줘"), at the start or the end of
the query. Anything else is left whole (None): a query that is not such a question is searched exactly as
before. The searcher, the page's highlights and the CLI each ask for one query's phrase: it is worked out once.
"""

from __future__ import annotations

import re
from functools import lru_cache

MIN_LETTERS = 2  # a sought phrase has at least this many letters or digits
_NOT_SOUGHT = {"me", "it", "this", "that", "mir", "es", "das"}  # what "Show me", "Zeig es" leave

# A quoted phrase: “…”, „…“, «…», »…«, 「…」, 『…』, "…", and '…' where the quote marks stand apart from
# words (so "don't" opens nothing; Korean particles may follow the closing mark: '사랑해요'라고).
_QUOTED = re.compile(r"“([^”]+)”|„([^“”]+)[“”]|«([^»]+)»|»([^«]+)«|「([^」]+)」|『([^』]+)』|\"([^\"]+)\"|"
                     r"‘([^’]+)’|(?:^|(?<=[\s(:]))'([^']+)'(?=$|[\s?.!,;:)]|[\uac00-\ud7a3])")
_QUESTION_END = re.compile(r"[\s?？!.]+$")

_WHERE_EN = r"(?:where|when|who|what|at what (?:time|point)|(?:in|on) which (?:\w+ )?\w+|which (?:\w+ )?\w+)"
_AUX_EN = r"(?:does|do|did|is|are|was|were|can|could|will|would)"
_WHO_EN = (r"(?:someone|somebody|anyone|anybody|one|i|we|you|he|she|they|it|a (?:man|woman|person|speaker)|"
           r"the (?:speaker|narrator|reader|presenter|video|clip|recording|file|audio|film|movie|scene))")
_VERB_EN = (r"(?:say|says|said|saying|mention|mentions|mentioned|talk about|talks about|talked about|speak (?:about|of)|"
            r"speaks (?:about|of)|read|reads|quote|quotes|discuss|discusses|show|shows|showing|contain|contains|feature|"
            r"features|see|find|hear|watch|get|hear about)")
_EN_PREFIXES: tuple[re.Pattern[str], ...] = (
    # "Where does someone say …", "Which recording mentions …", "Who says …", "Where can I see …"
    re.compile(rf"^{_WHERE_EN}\s+(?:{_AUX_EN}\s+)?(?:{_WHO_EN}\s+)?(?:{_VERB_EN}\s+)(?:that\s+|the words\s+)?", re.I),
    # "In which file does the narrator …" (whatever the narrator does is what is sought)
    re.compile(rf"^{_WHERE_EN}\s+{_AUX_EN}\s+{_WHO_EN}\s+", re.I),
    # "Is there a video with …", "Are there any clips of …", "Is there a recording about …"
    re.compile(r"^(?:is|are) there (?:an?|any|some)?\s*(?:\w+ )?(?:video|clip|recording|file|scene|part|moment|"
               r"film|movie|shot|audio)s?\s+(?:with|of|about|where|that shows|showing|in which)\s+", re.I),
    # "Where is …" / "Where are …" (then a trailing "mentioned", "said", … goes too)
    re.compile(r"^(?:where|when|in which (?:\w+ )?\w+)\s+(?:is|are|was|were)\s+", re.I),
    # A request: "Find the part where someone says …", "Show me the scene with …", "Play the bit about …"
    # (a frame noun is needed: "find my way home" and "show business" are searched as typed) ...
    re.compile(rf"^(?:please\s+)?(?:find|show|play|search for|look for|take me to|jump to)\s+(?:me\s+)?"
               r"(?:(?:the|a|an|any|every)\s+)?(?:part|moment|scene|clip|video|recording|file|bit|place|spot|shot)s?\s+"
               r"(?:where|when|in which|with|of|about|that shows|showing)\s+"
               rf"(?:{_WHO_EN}\s+)?(?:{_VERB_EN}\s+)?(?:that\s+)?", re.I),
    # ... or "Show me …"
    re.compile(r"^(?:please\s+)?show me\s+", re.I),
)
_EN_SUFFIX = re.compile(r"\s+(?:mentioned|said|shown|seen|heard|discussed|talked about|spoken (?:about|of)|"
                        r"read out|quoted|visible|in (?:the|this|any) (?:video|archive|recording|clip)s?)$", re.I)

_WHERE_DE = (r"(?:wo|wann|wer|was|an welcher stelle|in welche[mnrs]? \w+|welche[mnrs]? \w+|"
             r"gibt es (?:ein(?:e|en)?|irgendwo ein(?:e|en)?) \w+,? (?:in de[mnr]|wo|mit|über))")
_DE_PREFIXES: tuple[re.Pattern[str], ...] = (
    # "Wo sagt jemand: …" (the colon is dealt with apart), "Wer sagt …", "In welcher Aufnahme heißt es …"
    re.compile(rf"^{_WHERE_DE}\s+(?:sagt|sagte|erwähnt|erwähnte|spricht|sprach|redet|redete|liest|zitiert|zeigt|"
               r"heißt es|hört man|sieht man|kommt|kommen|geht es um|ist von|ist die rede von|wird|werden)"
               r"(?:\s+(?:jemand|man|er|sie|der sprecher|die sprecherin|der erzähler|die erzählerin))?"
               r"(?:\s+(?:von|über|davon|darüber))?(?:\s+(?:gesagt|erwähnt|gezeigt|gesprochen|geredet))?"
               r"(?:,?\s+dass)?\s+", re.I),
    # A request: "Zeig mir die Stelle, wo …", "Finde die Szene mit …", "Spiel den Teil über …" (a frame noun
    # is needed, as in English) ...
    re.compile(r"^(?:bitte\s+)?(?:zeig(?:e)?(?: mir)?|finde|such(?:e)?(?: nach)?|spiel(?:e)?)\s+"
               r"(?:(?:die|den|das|eine|einen|ein)\s+)?(?:stelle|moment|szene|teil|video|aufnahme|datei|clip)\s*,?\s*"
               r"(?:wo|in der|in dem|an der|mit|von|über|in der man|wo man)\s+"
               r"(?:(?:jemand|man|er|sie)\s+)?(?:(?:sagt|erwähnt|spricht über|spricht von)\s+|(?:über|von)\s+)?"
               r"(?:,?\s*dass\s+)?", re.I),
    # ... or "Zeig mir …"
    re.compile(r"^(?:bitte\s+)?zeig(?:e)? mir\s+", re.I),
)
_DE_SUFFIX = re.compile(r"\s+(?:vor|vorkommt|die rede|gesagt|erwähnt|gezeigt|zu sehen|zu hören|gesprochen|geredet|"
                        r"(?:gesagt|erwähnt|gezeigt) wird|(?:zu sehen|zu hören) ist|spricht|redet|sagt|erwähnt)$", re.I)

# Korean: the question word and predicate at the end, the thing it is about before them.
_KO_ASK = re.compile(r"\s*(?:(?:어디|어느\s*\S+|무슨\s*\S+|언제|누가)(?:에서|에|서)?\s*)?"
                     r"(?:나오나요|나와요|나옵니까|나오니|나오지|있나요|있어요|있습니까|있니|있지|인가요|입니까|"
                     r"이에요|예요|야|일까요|볼 수 있나요|들을 수 있나요|말했나요|말하나요|말합니까|했나요|나오는지|있는지|"
                     r"(?:찾아|보여|틀어|재생해|알려)\s*(?:줘|주세요|줄래|줄래요|주십시오|주실래요))$")
_KO_WHERE_ONLY = re.compile(r"\s*(?:어디|어느\s*\S+|언제)(?:에서|에|서)?$")
_KO_THING = re.compile(r"\s*(?:말|문장|구절|표현|대사|부분|내용|이야기|얘기|장면|영상|동영상|비디오|파일|녹음|클립|곳)"
                       r"(?:은|는|이|가|을|를)?$")
_KO_SHOWN = re.compile(r"\s*(?:나오는|나온|등장하는|보이는|있는|담긴|들리는|말하는|이야기하는|얘기하는|언급하는|언급된)$")
_KO_ABOUT = re.compile(r"\s*(?:에\s*)?(?:대한|관한|대해서?|관해서?)$")  # "공산주의에 대한 (이야기)": 공산주의
_KO_QUOTATIVE = re.compile(r"(?<=[라다자냐까요])(?:는|고|고 하는|고 말하는)$")
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
_KO_FRAMES = 4  # how deep Korean question frames nest, at most


@lru_cache(maxsize=1024)
def sought(query: str) -> str | None:
    """The phrase a question asks about (a quote, what follows its colon, or what its frame surrounds), or
    None when the query is no such question or nothing would remain."""
    text = query.strip()
    quoted = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(text)]
    if quoted:
        return _phrase(max(quoted, key=len), query)
    is_question = bool(re.search(r"[?？]\s*$", text))
    if is_question and ":" in text:
        head, _, tail = text.partition(":")
        if head.strip() and _letters(tail) >= MIN_LETTERS:
            return _phrase(tail, query)
    bare = _QUESTION_END.sub("", text)
    if _HANGUL.search(bare):
        return _phrase(_korean(bare), query)
    for prefixes, suffix in ((_EN_PREFIXES, _EN_SUFFIX), (_DE_PREFIXES, _DE_SUFFIX)):
        for prefix in prefixes:
            if (m := prefix.match(bare)) is not None:
                return _phrase(suffix.sub("", bare[m.end():]), query)
    return None


def _korean(text: str) -> str:
    for _ in range(_KO_FRAMES):  # frames nest: "… 단결하라는 | 말은 | 어디에 나오나요"
        before = text
        text = _KO_ASK.sub("", text) if _KO_ASK.search(text) else _KO_WHERE_ONLY.sub("", text)
        text = _KO_THING.sub("", text)
        if _KO_SHOWN.search(text):
            text = _without_particle(_KO_SHOWN.sub("", text))
        text = _KO_QUOTATIVE.sub("", text)
        text = _KO_ABOUT.sub("", text)
        if text == before:
            break
    return text


def _without_particle(text: str) -> str:
    """'앵무새가' (나오는 …) as '앵무새': the subject or object particle before a verb of appearing. 가 and 를
    follow a syllable without a final consonant, 이 and 을 one with it; a word that would keep fewer than two
    syllables keeps its ending (the particle may be the noun's own last syllable)."""
    words = text.split(" ")
    last = words[-1]
    if len(last) >= 3 and _HANGUL.fullmatch(last[-2]):
        final_consonant = (ord(last[-2]) - 0xAC00) % 28 != 0
        if (last[-1] in "가를" and not final_consonant) or (last[-1] in "이을" and final_consonant):
            words[-1] = last[:-1]
    return " ".join(words)


def _letters(text: str) -> int:
    return sum(ch.isalnum() for ch in text)


def _phrase(text: str, query: str) -> str | None:
    phrase = _QUESTION_END.sub("", text.strip(" \t,;:")).strip()
    if _letters(phrase) < MIN_LETTERS or phrase == query.strip() or phrase.casefold() in _NOT_SOUGHT:
        return None
    return phrase
