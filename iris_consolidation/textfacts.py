"""Pure text functions shared by the rule judge and the validator.

They pull out of a truth's text what a merge must never lose: numbers, dates,
proper names and negations; they normalise text so that two spellings of one
statement compare equal; and they reduce a truth to its content stems (Snowball
English stems of the words that are not function words) so that the validator can
tell "the same frame with one thing swapped" (a contrast: "Is allergic to peanuts" /
"Is allergic to shellfish") from a rewording, and can spot words that no source
stated. English only; a conservative approximation by design: when in doubt a
detail counts as present in a source, so the validator refuses.

Numbers compare by value ("3", "three", "a dozen"; ``numberwords``). Polarity counts
negation words and a small lexicon of negative verbs ("hates", "can't stand"), so two
negative statements of one dislike agree. Words that only frame a statement (negations,
negative verbs, "used to", "no longer", "quit") are carried by the polarity and
time-span checks and are not content words.

Languages written without spaces (Chinese, Japanese, Thai): a run of such characters is
one token for ``normalise``; for content it is compared by character cover
(``uncovered``): a run is kept by a text when it can be cut into pieces that each stand
in that text (one Han or kana character, three Thai characters at least), so inserted
words never count as a loss and a dropped word always does. Hiragana and a few Chinese
function characters (的, 了, 在, ...) carry grammar, not content, and are not required.

Names: a capitalised word inside a sentence is a name unless it is a listed function
word; a sentence's first word is capitalised anyway, so it counts as a name only if
it has a capital inside ("iPhone", "HVRA") or is a name somewhere else in the cluster
(the ``known`` argument, see ``known_names``).
"""

from __future__ import annotations

import difflib
import functools
import re
import unicodedata
from collections.abc import Iterable, Sequence

import snowballstemmer

from . import numberwords

_CONTRACTIONS = [
    (r"\bcan't\b", "can not"),
    (r"\bwon't\b", "will not"),
    (r"\bcannot\b", "can not"),
    (r"n't\b", " not"),
    (r"'m\b", " am"),
    (r"'re\b", " are"),
    (r"'ve\b", " have"),
    (r"'ll\b", " will"),
    (r"'d\b", " would"),
]


# Combining marks (Unicode categories Mn, Mc, Me) of the Basic Multilingual Plane: Thai
# vowels and tone marks, Devanagari vowel signs... belong to their word; without them
# "ไม่" (not) and "ไม้" (wood) would normalise to one word.
def _mark_ranges() -> str:
    """The combining marks as a regex class body of ranges ("\\u0300-\\u036f...")."""
    marks = [c for c in range(0x300, 0xFFFF) if unicodedata.category(chr(c)) in ("Mn", "Mc", "Me")]
    ranges: list[tuple[int, int]] = []
    for c in marks:
        if ranges and c == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], c)
        else:
            ranges.append((c, c))
    return "".join(f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)


_MARKS = _mark_ranges()
_LETTER = rf"(?:[^\W\d_]|[{_MARKS}])"
_WORD = re.compile(rf"[0-9]+(?:[.,:/-][0-9]+)*|{_LETTER}+(?:['’-]{_LETTER}+)*", re.UNICODE)
_RAW_WORD = re.compile(rf"{_LETTER}+(?:['-]{_LETTER}+)*|[.!?;:]", re.UNICODE)
#: Scripts written without spaces between words: Han, kana, Thai.
_NO_SPACE = "\u3005\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u0e01-\u0e5b"
_NO_SPACE_RUN = re.compile(f"[{_NO_SPACE}]+")
_HIRAGANA = re.compile("[\u3040-\u309f]")
_THAI = re.compile("[\u0e01-\u0e5b]")
#: Chinese function characters (particles, pronouns, the copula, "has", "called"): grammar, not content.
_HAN_FUNCTION = frozenset("的了着过是在和与及也都就很把被给我你他她它们这那之其而或有叫")
NEGATIONS = frozenset(
    {"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without"}
    # Portuguese, Spanish, French, German, Italian ("no" is Spanish too; "nada" is left out:
    # it also means "swims").
    | {"não", "nunca", "nem", "jamais", "ninguém", "nenhum", "nenhuma", "sem", "tampoco", "ningún", "ninguna"}
    | {"pas", "nicht", "kein", "keine", "keinen", "keiner", "nie", "niemals", "non"}
)
#: Negations inside a run of a script without spaces (Chinese, Japanese, Thai), matched
#: as substrings; each occurrence counts once.
NO_SPACE_NEGATIONS = ("不", "没", "沒", "别", "別", "未", "无", "無", "ない", "ません", "ไม่")
#: Dislikes in those scripts: each counts as one negation, as ``NEGATIVE_VERBS``.
NO_SPACE_NEGATIVE_VERBS = ("讨厌", "討厭", "嫌い", "เกลียด")
#: Verbs that state a dislike: each counts as one negation, so "Hates jazz" and "Does not
#: like jazz" agree while "Likes jazz" stays their opposite.
NEGATIVE_VERBS = frozenset(
    """hate hates hated hating dislike dislikes disliked detest detests detested loathe loathes
    loathed despise despises despised avoid avoids avoided abhor abhors abhorred
    odeia odeio odia odio detesta detesto evita""".split()
)
#: Phrases that state a dislike with a "not" inside: one negation in all.
NEGATIVE_PHRASES = ("can not stand", "could not stand", "can not bear", "could not bear")
#: Idioms whose negation word states a liking or eagerness, not its opposite
#: ("Cannot wait to move out" restates "Is excited to leave home", "Nothing beats a hot
#: cup of java" restates "Is a huge coffee lover"). Matched on the normalised text and
#: read as the plain words on the right by ``polarity`` and ``contrast``, so "Can't wait
#: to retire" / "Can wait to retire" still differ (eager / wait: a contrast) and "Does
#: not want to move out" keeps its negation. ``lost_words`` reads the words as written.
POSITIVE_IDIOMS = (
    ("can not wait to", "eager to"),
    ("could not wait to", "eager to"),
    ("can not wait for", "eager for"),
    ("could not wait for", "eager for"),
    ("not to give up", "to keep going"),
    ("not give up", "keep going"),
    ("never give up", "keep going"),
    ("never gives up", "keeps going"),
    ("nothing beats", "loves"),
    ("nothing is better than", "loves"),
    ("nothing compares to", "loves"),
)
MONTHS = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday "
    "saturday sunday weekend weekday".split()
)
# Capitalised words that are not names when they start a clause or stand alone.
_NOT_NAMES = frozenset(
    "i the a an he she they we you it his her their my our your this that these those is was "
    "has have had does did do user users likes loves prefers works lives enjoys".split()
)
#: Function words and the glue of truth phrasing ("has", "named", "the user", and the
#: same in Portuguese and Spanish: "tem", "chamado", "tiene", "llamada"): they carry no
#: fact of their own, so they are left out of content stems.
STOPWORDS = frozenset(
    """a an the this that these those it its they them their theirs he him his she her hers
    i me my mine we us our you your user users person someone
    is am are was were be been being has have had having do does did doing get gets got
    owns own possesses named called
    and or but so if then than as of at by for from in into on onto to with within about
    over under up down out off through during before after above below between among per
    via near also too very really quite just only still even much many more most some any
    each every all both either one's who whom whose which what when where while why how
    there here can could will would shall should may might must
    s""".split()
) | frozenset(
    # Articles, prepositions and copulas of Portuguese, Spanish, French, Italian and German
    # that are no English content word, so that a truth in another language (or a mixed
    # one) is compared by its content words too. ("no" stays a negation, "son" a son.)
    """o os as um uma é são está estão do da dos das na nas nos em ao aos à às com para pelo pela
    tem têm tinha chamado chamada chamados chamadas
    de el la los las un una es está están del al en y con por para lo se su sus que
    tiene tienen tenía llamado llamada llamados llamadas
    le les une des du est et au aux avec pour sur il elle ils elles
    il lo gli le è sono di del della nel nella con per
    der das ein eine ist sind und im mit zu von dem den des e""".split()
)
#: Words of preference, reduced to one stem so that "Likes green best" and "Favourite
#: colour is green" share it.
_PREFERENCE = frozenset(
    "like likes liked love loves loved enjoy enjoys enjoyed prefer prefers preferred "
    "favourite favourites favorite favorites fond "
    # Portuguese and Spanish
    "gosta gosto gostam adora adoro prefere prefiro gusta gustan encanta encantan prefiere prefiero".split()
)
#: Words that report a change against an earlier state
#: ("Left St Mary's and now works at a hospice"): a member saying one is never merged with
#: one that does not. Words that only name an event ("married", "sold", "new", "started")
#: let a supersede through but do not block a merge: "Enjoys visiting new places" restates
#: "Likes to travel".
REPORTED_CHANGE_MARKERS = (
    "agora",
    "já não",
    "mudou",
    "mudou-se",
    "saiu",
    "deixou",
    "ahora",
    "ya no",
    "se mudó",
    "dejó",
    "now",
    "no longer",
    "anymore",
    "any more",
    "instead",
    "moved",
    "switched",
    "replaced",
    "changed",
    "stopped",
    "quit",
    "left",
    "gave up",
    "has since",
    "used to",
    "got rid",
    "rescheduled",
    # Moves by another name ("Immigrated within the past few years" restates
    # "Recently moved to this country"; each still never merges with "Lives here").
    "immigrated",
    "emigrated",
    "relocated",
)

#: Words in a newer statement that say the state changed, so an older one may retire
#: in its favour: the reported changes above and words that name an event. Phrases are
#: matched on the normalised text.
CHANGE_MARKERS = (
    *REPORTED_CHANGE_MARKERS,
    "passou a",
    "cambió",
    "not anymore",
    "moves",
    "became",
    "becomes",
    "started",
    "new",
    "updated",
    "married",
    "divorced",
    "graduated",
    "retired",
    "sold",
    "was moved",
)


#: Change markers of scripts without spaces, matched as substrings: "now", "no longer",
#: "moved", "quit", "switched to", "formerly" in Chinese, Japanese and Thai.
NO_SPACE_CHANGE_MARKERS = (
    "现在", "現在", "不再", "搬到", "搬去", "辞职", "辭職", "换成", "改成", "以前", "曾经", "曾經",
    "今は", "もう", "引っ越", "辞め", "以前は",
    "ตอนนี้", "ย้าย", "เลิก", "เคย",
)  # fmt: skip
#: Of those, the ones that say a state ended.
NO_SPACE_TIME_ENDED = ("不再", "以前", "曾经", "曾經", "辞职", "辭職", "もう", "辞め", "เลิก", "เคย")

#: Words that say a state has ended ("Worked there until 2023", "used to"): such a
#: statement covers another span of time than one without them.
TIME_ENDED = (
    "until",
    "till",
    "formerly",
    "former",
    "previously",
    "used to",
    "anymore",
    "any more",
    "no longer",
    "no more",
    "quit",
    "stopped",
    "gave up",
    "has given up",
    "já não",
    "deixou de",
    "costumava",
    "ya no",
    "dejó de",
    "solía",
)
#: Words that only frame a statement (its polarity, or that its state ended): they are
#: compared by ``polarity`` and ``time_ended``, not as content words.
FRAME_PHRASES = (*NEGATIVE_PHRASES, "used to", "no longer", "any more", "no more", "gave up", "has given up")
FRAME_WORDS = (
    NEGATIONS | NEGATIVE_VERBS | frozenset("until till formerly former previously anymore quit stopped now".split())
)
#: "Works as a nurse" says no more than "Is a nurse".
JOB_FRAMES = ("works as", "worked as", "working as", "employed as", "has a job as", "trabalha como", "trabaja como")
#: Preference words of scripts without spaces ("likes"), dropped from a negated statement.
NO_SPACE_PREFERENCE = ("喜欢", "喜歡", "好き", "ชอบ")
#: Light verbs: "Goes running" says no more than "Runs". A member may lose them.
LIGHT_VERBS = frozenset("go goes went going gone".split())
#: Words of one meaning in truths about a person; a member's word is kept when the
#: content has another of its group ("Birthday is on 14 March" / "Was born on March 14").
#: Stems of the group members; a small closed list, not a thesaurus.
SYNONYM_GROUPS = (
    frozenset({"birthday", "born", "birth"}),
    frozenset({"best", "favourit", "favorit"}),
)
#: Stems that name one frame for the contrast check only (``contrast``): "Work as a
#: nurse" and "My job is nursing" are one frame with nothing swapped, while "Works as a
#: nurse" / "My job is teaching" still swap nurse for teaching. Not used by
#: ``lost_words``: a merge that drops "job" for "work" must still say so in its reason.
CONTRAST_FRAMES = (
    frozenset({"job", "work", "employ", "profess", "occup", "career"}),
    frozenset({"move", "reloc", "immigr", "emigr"}),
    frozenset({"eager", "excit"}),
)

#: Everyday rewordings of one fact about a person that carry no detail of their own:
#: a member's phrase on one side is kept by a merged text that keeps the
#: phrase on the other side ("Is the father of a boy called Tomas" by "Has a son named
#: Tomas", "Jogs each Saturday before noon" by "Runs every Saturday morning"). Matched
#: as whole phrases of stems in the member, so that "Tomas is the user's father" never
#: reads as "father of a boy", and "after noon" never as "before noon". A small closed
#: list in the languages the validator reads, not a thesaurus: a judge states any other
#: synonym in its reason.
PHRASE_EQUIVALENCES: tuple[tuple[str, str], ...] = (
    # Kinship stated from the other side: the parent of a boy has a son.
    ("father of a boy", "son"),
    ("mother of a boy", "son"),
    ("parent of a boy", "son"),
    ("father of a girl", "daughter"),
    ("mother of a girl", "daughter"),
    ("parent of a girl", "daughter"),
    ("pai de um menino", "filho"),
    ("mãe de um menino", "filho"),
    ("pai de uma menina", "filha"),
    ("mãe de uma menina", "filha"),
    ("padre de un niño", "hijo"),
    ("madre de un niño", "hijo"),
    ("padre de una niña", "hija"),
    ("madre de una niña", "hija"),
    ("男孩的父亲", "儿子"),
    ("男孩的母亲", "儿子"),
    ("女孩的父亲", "女儿"),
    ("女孩的母亲", "女儿"),
    # Running for exercise, and the morning.
    ("jog", "run"),
    ("jogging", "running"),
    ("慢跑", "跑步"),
    ("ジョギング", "ランニング"),
    ("before noon", "morning"),
    ("antes do meio-dia", "manhã"),
    ("antes del mediodía", "mañana"),
    ("中午前", "上午"),
    ("中午之前", "上午"),
    ("昼前", "午前"),
    # A language: speaking it fluently is being fluent in it.
    ("speaks fluent", "fluent in"),
)

_stemmer = snowballstemmer.stemmer("english")


#: A letter of a script with spaces beside one without ("在Birch", "Co当会计"): mixed-language
#: truths keep their names as words of their own.
_SCRIPT_EDGE = re.compile(rf"(?<=[{_NO_SPACE}])(?=[^\W\d_{_NO_SPACE}])|(?<=[^\W\d_{_NO_SPACE}])(?=[{_NO_SPACE}])")


def _ascii_fold(text: str) -> str:
    """NFKC, typographic apostrophes made plain, and a space where a script with spaces
    meets one without (a name written into Chinese or Japanese text stays a word)."""
    text = unicodedata.normalize("NFKC", text).replace("’", "'").replace("‘", "'")
    return _SCRIPT_EDGE.sub(" ", text)


def normalise(text: str) -> str:
    """Lower-case, contractions expanded, punctuation dropped, spaces collapsed.

    "I'm a nurse." and "i am a nurse" both give "i am a nurse".
    """
    text = _ascii_fold(text).lower()
    for pattern, repl in _CONTRACTIONS:
        text = re.sub(pattern, repl, text)
    return " ".join(_WORD.findall(text))


def tokens(text: str) -> list[str]:
    """Words of the normalised text, in order."""
    return normalise(text).split()


_COMPILED_CONTRACTIONS = tuple((re.compile(pattern), repl) for pattern, repl in _CONTRACTIONS)


def tokens_of_each(texts: Sequence[str]) -> list[list[str]]:
    """``tokens`` of each of ``texts``, in order: every step but the last runs once over
    the texts joined by NUL, which no stored text holds (PostgreSQL refuses it in text)
    and which every step treats as the end of a text (not a letter, digit or space; a
    starter for NFKC, uncased for ``lower``)."""
    if any("\x00" in text for text in texts):
        return [tokens(text) for text in texts]
    joined = _ascii_fold("\x00".join(texts)).lower()
    for pattern, repl in _COMPILED_CONTRACTIONS:
        joined = pattern.sub(repl, joined)
    return [_WORD.findall(text) for text in joined.split("\x00")] if texts else []


def numbers(text: str) -> set[str]:
    """Every number in ``text`` by value, as ``numberwords.values`` gives it: "3" for
    "3", "three" or "três", "12" for "a dozen", "2nd" for "second", "2x" for "twice"."""
    return numberwords.values(_ascii_fold(text))


def _capitalised(word: str) -> bool:
    return word[0].isupper() or any(c.isupper() for c in word[1:])


def _name_candidates(text: str) -> list[tuple[str, bool]]:
    """Capitalised words of ``text`` with whether each starts a sentence."""
    found: list[tuple[str, bool]] = []
    starts = True
    for match in _RAW_WORD.finditer(_ascii_fold(text)):
        word = match.group(0)
        word = word[:-2] if word.endswith("'s") and len(word) > 2 else word  # "Joanna's" names Joanna
        if word in ".!?;:":
            starts = True
            continue
        if _capitalised(word) and word.lower() not in _NOT_NAMES:
            found.append((word, starts))
        starts = False
    return found


def known_names(texts: Iterable[str]) -> frozenset[str]:
    """Lower-case words that stand as names inside a sentence of one of ``texts``."""
    return frozenset(
        word.lower()
        for text in texts
        for word, initial in _name_candidates(text)
        if not initial or any(c.isupper() for c in word[1:])
    )


def proper_names(text: str, *, known: frozenset[str] = frozenset()) -> list[str]:
    """Names in ``text``, lower-case, in order (see the module docstring).

    Month and weekday names are included: they are dates, which a merge must keep.
    """
    names = []
    for word, initial in _name_candidates(text):
        lower = word.lower()
        if initial and lower not in known and not any(c.isupper() for c in word[1:]):
            continue
        names.append(lower)
    return names


def _singular(word: str) -> str:
    return word[:-1] if word.endswith("s") and word[:-1] in MONTHS else word


def dates(text: str) -> set[str]:
    """Month, weekday and weekend names in ``text`` (lower-case, singular)."""
    return {_singular(t) for t in tokens(text)} & MONTHS


def negations(text: str) -> set[str]:
    """Negation words and negative verbs in the normalised text ("not", "never", "hates")."""
    return set(tokens(text)) & (NEGATIONS | NEGATIVE_VERBS)


def _positive_idioms(text: str) -> str:
    """The normalised ``text``, space-padded, with each ``POSITIVE_IDIOMS`` phrase read
    as its plain words: "I can't wait to go." -> " i eager to go "."""
    haystack = f" {normalise(text)} "
    for phrase, plain in POSITIVE_IDIOMS:
        haystack = haystack.replace(f" {phrase} ", f" {plain} ")
    return haystack


def _polarity_words(text: str) -> list[str]:
    """The negations of ``text``, in order, a negative phrase as one ("can not stand"),
    without those that say a state ended ("no longer", "not ... anymore") or that belong
    to a positive idiom ("can not wait to", ``POSITIVE_IDIOMS``)."""
    haystack = _positive_idioms(text)
    for phrase in ("no longer", "no more", "já não", "ya no"):
        haystack = haystack.replace(f" {phrase} ", " ")
    for phrase in NEGATIVE_PHRASES:
        haystack = haystack.replace(f" {phrase} ", " hates ")
    words = haystack.split()
    if "anymore" in words or "any more" in haystack:
        for i, word in enumerate(words):
            if word in ("not", "never"):
                del words[i]  # "does not smoke anymore": the state ended
                break
    found = [w for w in words if w in NEGATIONS or w in NEGATIVE_VERBS]
    if "no" in found and _portuguese(words):
        found = [w for w in found if w != "no"]  # "no" is "in the" in Portuguese
    for run in no_space_runs(text):
        for marker in NO_SPACE_TIME_ENDED:
            run = run.replace(marker, " ")  # 不再 ("no longer"): the state ended
        for verb in NO_SPACE_NEGATIVE_VERBS:
            found.extend(["hates"] * run.count(verb))
            run = run.replace(verb, " ")
        for negation in NO_SPACE_NEGATIONS:
            found.extend(["not"] * run.count(negation))
            run = run.replace(negation, " ")
    return found


_SENTENCE = re.compile(r"[.;!?\n。；！？]+")


def sentence_polarity_keys(text: str) -> set[tuple[bool, bool]]:
    """``polarity_key`` of each sentence of ``text`` (split at . ; ! ? and newlines), so
    that two joined negative statements ("Hates jazz; Does not like jazz") stay negative."""
    return {polarity_key(part) for part in _SENTENCE.split(text) if part.strip()} or {polarity_key("")}


#: Words and letters that mark a text as Portuguese, where "no" means "in the".
_PORTUGUESE_WORDS = frozenset(
    "da das dos na nas nos num numa em um uma é ao à com não muito também agora ele ela mas ou pelo pela isso "
    "então".split()
)


def _portuguese(words: list[str]) -> bool:
    return bool(_PORTUGUESE_WORDS.intersection(words)) or any(c in "ãõç" for w in words for c in w)


def polarity(text: str) -> bool:
    """True when the statement is negated an odd number of times, a negative verb
    ("hates", "dislikes", "can't stand", "avoids") counting as one negation."""
    return len(_polarity_words(text)) % 2 == 1


def polarity_key(text: str) -> tuple[bool, bool]:
    """(``polarity``, whether a negative verb is itself negated): "Does not hate jazz"
    is even but no "Likes jazz", so the two keys differ; "Hates jazz" and "Doesn't like
    jazz" share (True, False)."""
    words = _polarity_words(text)
    negated_verb = any(w in NEGATIVE_VERBS for w in words) and any(w in NEGATIONS for w in words)
    return len(words) % 2 == 1, negated_verb


def details(text: str, *, known: frozenset[str] = frozenset()) -> set[str]:
    """Numbers (by value, see ``numbers``), dates and proper names of ``text``,
    lower-case: what a merge must keep."""
    names = {_singular(n) for n in proper_names(text, known=known)}
    return numbers(text) | dates(text) | names


def contains_detail(text: str, detail: str) -> bool:
    """Whether ``detail`` (from ``details``) stands in ``text``: a number by value
    ("3" is in "three cats", never in "13" or "3.5"), a name or date as a whole word."""
    if detail in numberwords.values(_ascii_fold(text)):
        return True
    if detail[:1].isdigit() or detail in numberwords.INEXACT:
        return False
    haystack = " " + " ".join(_singular(t.removesuffix("'s")) for t in tokens(text)) + " "
    probe = normalise(detail)
    if probe and f" {probe} " in haystack:
        return True
    if detail.isalpha():
        return False
    # Inside a longer word ("Jean-Luc's").
    return re.search(re.escape(detail.lower()), _ascii_fold(text).lower()) is not None


@functools.lru_cache(maxsize=8192)
def stem(word: str) -> str:
    """The Snowball English stem of a lower-case word; preference words share "like"."""
    if word in _PREFERENCE:
        return "like"
    return _stemmer.stemWord(word)


def same_stem(a: str, b: str) -> bool:
    """Stems of one word family: equal, or one a prefix (>= 5 letters) of the other
    ("allerg" / "allergi", which Snowball leaves apart)."""
    if a == b:
        return True
    short, long_ = sorted((a, b), key=len)
    return len(short) >= 5 and long_.startswith(short)


def content_stems(text: str, *, exclude: Iterable[str] = ()) -> set[str]:
    """Stems of the words of ``text`` that are not stop words, negations, negative verbs
    or ``exclude``d (lower-case words, e.g. the text's details). Runs of a script
    without spaces are left out: ``uncovered`` compares them."""
    skip = set(exclude)
    words = [t.removesuffix("'s") for t in tokens(text)]  # "user's" -> "user"
    return {
        stem(_singular(t))
        for t in words
        if t not in STOPWORDS
        and t not in NEGATIONS
        and t not in NEGATIVE_VERBS
        and _singular(t) not in skip
        and t not in skip
        and not t[0].isdigit()
        and not _NO_SPACE_RUN.fullmatch(t)
        and not _number_word(t)
    }


@functools.lru_cache(maxsize=8192)
def _number_word(word: str) -> bool:
    """Whether ``word`` is a number word ("three", "dozen", "dois") or an ordinal suffix
    after digits ("nd" of "2nd"): numbers compare by value, not as content words."""
    return (
        word in ("st", "nd", "rd", "th", "times") or word in numberwords.NUMBER_WORDS or bool(numberwords.values(word))
    )


def _missing(stems: set[str], others: set[str]) -> set[str]:
    return {s for s in stems if not any(same_stem(s, o) for o in others)}


def no_space_runs(text: str) -> list[str]:
    """Runs of Han, kana and Thai characters in the normalised ``text``, in order."""
    return _NO_SPACE_RUN.findall(normalise(text))


def _significant(piece: str) -> bool:
    """Whether ``piece`` carries content: a Han character other than a function one,
    katakana or Thai (hiragana is grammar: particles and endings)."""
    return any(not _HIRAGANA.match(c) and c not in _HAN_FUNCTION and c != "\u30fc" for c in piece)


def uncovered(run: str, haystack: str) -> list[str]:
    """Pieces of ``run`` (from ``no_space_runs``) that stand nowhere in ``haystack``.

    Greedy longest match from the left: each step takes the longest piece of ``run``
    that ``haystack`` contains (one character at least for Han and kana, three for
    Thai, whose letters alone mean nothing); characters no such piece covers make the
    result, grouped, without pieces of grammar only (``_significant``).
    """
    pieces: list[str] = []
    lost = ""
    i = 0
    while i < len(run):
        need = 3 if _THAI.match(run[i]) else 1
        length = 0
        for size in range(len(run) - i, need - 1, -1):
            if run[i : i + size] in haystack:
                length = size
                break
        if length:
            if lost:
                pieces.append(lost)
                lost = ""
            i += length
        else:
            lost += run[i]
            i += 1
    if lost:
        pieces.append(lost)
    return [p for p in pieces if _significant(p)]


def unstated_stems(text: str, sources: Iterable[str]) -> set[str]:
    """Content stems of ``text`` found in none of ``sources``, and pieces of its runs
    without spaces (``uncovered``) that no source holds."""
    sources = list(sources)
    stated: set[str] = set()
    for source in sources:
        stated |= content_stems(source)
    haystack = "\n".join(normalise(source) for source in sources)
    pieces = {p for run in no_space_runs(text) for p in uncovered(run, haystack)}
    return _missing(content_stems(text), stated) | pieces


def share_script_text(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` share a content character of a script without spaces."""
    chars_a = {c for run in no_space_runs(a) for c in run if _significant(c)}
    return any(c in chars_a for run in no_space_runs(b) for c in run)


def _frame_free(text: str) -> str:
    """The normalised ``text`` without its frame phrases and words (``FRAME_WORDS``, and
    the markers of scripts without spaces), its numbers in Chinese or Japanese numerals
    (compared by value), and, when negated, its preference words ("Does not like jazz"
    says what "Hates jazz" says)."""
    negated = polarity(text)
    haystack = f" {normalise(numberwords.strip_cjk(text))} "
    for phrase in (*FRAME_PHRASES, *JOB_FRAMES):
        haystack = haystack.replace(f" {phrase} ", " ")
    for marker in (*NO_SPACE_TIME_ENDED, *NO_SPACE_CHANGE_MARKERS, *NO_SPACE_NEGATIVE_VERBS, *NO_SPACE_NEGATIONS):
        haystack = haystack.replace(marker, " ")
    if negated:
        for word in NO_SPACE_PREFERENCE:
            haystack = haystack.replace(word, " ")
    return " ".join(w for w in haystack.split() if w not in FRAME_WORDS and not (negated and stem(w) == "like"))


#: A reason states a synonym as ``word = synonym`` (either side a word or a quoted
#: phrase; "means" and "->" also join them).
# A quoted phrase may hold an apostrophe inside a word ('it's important'); a note in
# brackets may follow it ("'finds inspiration' (t24) = 'watches'").
_PHRASE = r"""(?:["“'‘](?:[^"”'’]|['’](?=\w))+["”'’]|[^\s=,;:"“”'‘’()]+)"""
_EQUIVALENCE = re.compile(
    rf"""({_PHRASE})(?:\s*\([^)]*\))?\s*(?:=|->|→|means)\s*({_PHRASE})"""
)


def equivalences(reason: str) -> list[tuple[str, str]]:
    """The synonyms a judge states in ``reason``: ``'father of a boy' = 'son'`` gives
    ("father of a boy", "son"); ``gatos = cats`` gives ("gatos", "cats")."""
    return [(a.strip("\"“”'‘’ "), b.strip("\"“”'‘’ ")) for a, b in _EQUIVALENCE.findall(_ascii_fold(reason))]


def _kept(phrase: str, content: str, content_stems_: set[str]) -> bool:
    """Whether every content word of ``phrase`` stands in ``content``; a phrase of
    function words only ("and", "too much", "when i was three") when its every word does."""
    stems = content_stems(phrase)
    runs = no_space_runs(phrase)
    if not stems and not runs:
        words = tokens(phrase)
        return bool(words) and set(words) <= set(tokens(content))
    haystack = normalise(content)
    return not _missing(stems, content_stems_) and all(not uncovered(r, haystack) for r in runs)


def _stem_sequence(text: str) -> list[str]:
    return [stem(_singular(t)) for t in tokens(text)]


def has_phrase(text: str, phrase: str) -> bool:
    """Whether ``phrase`` stands in ``text`` as a whole: its words' stems in a row
    ("jogs" has "jog"), or, in a script without spaces, as a substring."""
    if no_space_runs(phrase):
        return normalise(phrase) in normalise(text)
    words, probe = _stem_sequence(text), _stem_sequence(phrase)
    return bool(probe) and any(words[i : i + len(probe)] == probe for i in range(len(words) - len(probe) + 1))


def _equivalent_in(member: str, content: str) -> list[str]:
    """Phrases of ``member`` that ``content`` restates by ``PHRASE_EQUIVALENCES``."""
    return [
        x
        for a, b in PHRASE_EQUIVALENCES
        for x, y in ((a, b), (b, a))
        if has_phrase(member, x) and has_phrase(content, y)
    ]


def lost_words(member: str, content: str, *, reason: str = "", known: frozenset[str] = frozenset()) -> list[str]:
    """Content words of ``member`` that ``content`` drops, sorted.

    A word is kept when ``content`` has a word of its family (``same_stem``), another
    word of its ``SYNONYM_GROUPS`` group, the other side of a ``PHRASE_EQUIVALENCES``
    phrase of ``member`` that holds it, or the ``reason`` states it as a synonym of
    words ``content`` has (``equivalences``). Not counted: stop words, details (checked
    one by one by the validator), frame words (``FRAME_WORDS``: carried by polarity and
    time span), and a preference word in a negated statement ("Does not like jazz" is
    kept by "Hates jazz"). Runs of a script without spaces count by the pieces
    ``content`` does not hold (``uncovered``).
    """
    frame_free = _frame_free(member)
    stems = content_stems(frame_free, exclude=details(member, known=known) | LIGHT_VERBS)
    have = content_stems(content) | {stem(t) for t in tokens(content)} | {_stemmer.stemWord(t) for t in tokens(content)}
    for group in SYNONYM_GROUPS:
        if group & have:
            have |= group
    restated = _equivalent_in(member, content)
    for phrase in restated:
        have |= content_stems(phrase)
    lost = _missing(stems, have)
    haystack = normalise(content)
    unsaid = frame_free
    for phrase in restated:
        if no_space_runs(phrase):
            unsaid = unsaid.replace(normalise(phrase), " ")  # its content says it the other way
    pieces = [p for run in no_space_runs(unsaid) for p in uncovered(run, haystack)]
    pairs = equivalences(reason)

    def stated(word: str, *, piece: bool) -> bool:
        for a, b in (*pairs, *((b, a) for a, b in pairs)):
            said = a in word or word in normalise(a) if piece else any(same_stem(word, x) for x in content_stems(a))
            if said and _kept(b, content, have):
                return True
        return False

    return sorted({w for w in lost if not stated(w, piece=False)} | {p for p in pieces if not stated(p, piece=True)})


def shares_only_details(a: str, b: str, *, reason: str = "", known: frozenset[str] = frozenset()) -> set[str]:
    """The details (names, numbers, dates) ``a`` and ``b`` share when that is all they
    share: each says something of its own and neither keeps any content word of the
    other (by ``lost_words``: families, synonyms, rewordings, or synonyms the ``reason``
    states). Empty otherwise.

    Two facts about one named thing ("Works as an accountant at Birch & Co" / "Organises
    the Birch & Co office softball team"): the shared name pulls them into one
    cluster, and nothing else says they are one fact.
    """
    # A capitalised first word of both texts is a name too ("Birch & Coで会計士...").
    initial = [{w.lower() for w, first in _name_candidates(t) if first} for t in (a, b)]
    known = known | (initial[0] & initial[1])
    shared = {d for d in details(a, known=known) if contains_detail(b, d)}
    if not shared:
        return set()
    for x, y in ((a, b), (b, a)):
        own = _units(lost_words(x, "", known=known))
        if not own or own - _units(lost_words(x, y, reason=reason, known=known)):
            return set()
    return shared


def _units(words: list[str]) -> set[str]:
    """``lost_words`` output as comparable units: stems, and the content characters of
    pieces of a script without spaces (how pieces are grouped depends on the other text)."""
    units: set[str] = set()
    for word in words:
        if _NO_SPACE_RUN.search(word):
            units |= {c for c in word if _significant(c)}
        else:
            units.add(word)
    return units


def reports_change(text: str) -> bool:
    """Whether ``text`` reports a change against an earlier state ("now", "moved",
    "left", "used to", "quit", ``REPORTED_CHANGE_MARKERS``): such a member is superseded
    or kept, never merged away."""
    return time_ended(text) or _has_marker(text, REPORTED_CHANGE_MARKERS, NO_SPACE_CHANGE_MARKERS)


def contrast(a: str, b: str, *, known: frozenset[str] = frozenset()) -> tuple[set[str], set[str]] | None:
    """The swapped words if ``a`` and ``b`` share a frame with a slot changed, else None.

    Over content stems other than details: both have words of their own, and they
    share at least as many words as either has alone ("Owns a red bicycle" / "Owns a
    red car": shared {red}, swapped {bicycl} / {car}). Rewordings share less than they
    change ("Has a son named Tomas" / "Is the father of a boy called Tomas"). Stems of
    one ``CONTRAST_FRAMES`` group count as one word ("work" / "job").
    """
    stems_a = _one_frame(content_stems(_frame_free(_positive_idioms(a)), exclude=details(a, known=known)))
    stems_b = _one_frame(content_stems(_frame_free(_positive_idioms(b)), exclude=details(b, known=known)))
    only_a, only_b = _missing(stems_a, stems_b), _missing(stems_b, stems_a)
    shared = stems_a - only_a
    # A rewording ("before noon" / "morning") is no swapped slot.
    only_a -= {s for x in _equivalent_in(a, b) for s in content_stems(x)}
    only_b -= {s for x in _equivalent_in(b, a) for s in content_stems(x)}
    # One slot swapped: a word or two on each side of a short statement. Long statements
    # that share a topic differ in several words at once: rewordings, not a swapped slot.
    one_slot = max(len(only_a), len(only_b)) <= CONTRAST_SLOT_WORDS
    short = max(len(stems_a), len(stems_b)) <= CONTRAST_STATEMENT_WORDS
    if only_a and only_b and shared and one_slot and short and len(shared) >= max(len(only_a), len(only_b)):
        return only_a, only_b
    return None


#: Most content words on either side of a contrast (a swapped slot): "a red bicycle" /
#: "a red car" swap one; "considering counseling to help trans people accept themselves"
#: / "... to help others" reword a clause (LoCoMo's merges: 33 of 73 flagged at any size).
CONTRAST_SLOT_WORDS = 2
#: Most content words of a statement with a swapped slot: a short fact ("Drinks coffee
#: with oat milk": 4). Two longer statements that share all but a word or two are, as
#: measured on the recorded replies of a real model (LoCoMo: 7 of its 73 actions), two
#: wordings of one observation ("finds it rewarding" / "finds it fulfilling").
CONTRAST_STATEMENT_WORDS = 4
#: Articles, left out of a statement's frame ("Chose a standing desk" / "Chose an e-reader").
_ARTICLES = frozenset("a an the um uma uns umas o os as el la los las un una unos unas le les une des".split())


def _frame_words(text: str) -> list[str]:
    """The words of ``text`` as stems, articles left out, for ``parallel``."""
    return [stem(_singular(w)) if w not in STOPWORDS else w for w in tokens(text) if w not in _ARTICLES]


def parallel(a: str, b: str, *, known: frozenset[str] = frozenset()) -> tuple[set[str], set[str]] | None:
    """The words of each side if ``a`` and ``b`` are one frame filled twice, else None.

    Shared syntax makes two different statements look alike ("Chose a
    standing desk over a treadmill desk for the home office" / "Chose an e-reader over
    paper books for travelling": both "chose _ over _ for _"). Aligned word by word
    (``difflib``, articles left out), the two start with the same words and keep the
    same words in the same order, among them a content word other than a preference
    ("likes": the commonest frame of all), and differ only in two slots or more, each
    filled on both sides with content words: a list of different choices. A rewording
    moves, adds or drops words. ``contrast`` finds the frames with one slot changed.
    """
    words_a, words_b = _frame_words(a), _frame_words(b)
    slots_a: set[str] = set()
    slots_b: set[str] = set()
    slots = 0
    frame_has_content = False
    opcodes = difflib.SequenceMatcher(a=words_a, b=words_b, autojunk=False).get_opcodes()
    if not opcodes or opcodes[0][0] != "equal":
        return None  # the frame starts the statement: its verb ("chose", "picked")
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            frame_has_content |= any(w not in STOPWORDS | LIGHT_VERBS and w != "like" for w in words_a[i1:i2])
            continue
        if tag != "replace":
            return None
        fill_a = {w for w in words_a[i1:i2] if w not in STOPWORDS}
        fill_b = {w for w in words_b[j1:j2] if w not in STOPWORDS}
        if not fill_a or not fill_b:
            return None
        if max(len(fill_a), len(fill_b)) > CONTRAST_SLOT_WORDS:
            return None  # a clause reworded, not a slot filled with another choice
        if _equivalent_in(" ".join(words_a[i1:i2]), " ".join(words_b[j1:j2])):
            continue  # a rewording of the same filler ("jogging" / "running")
        slots += 1
        slots_a |= fill_a
        slots_b |= fill_b
    if slots < 2 or not frame_has_content:
        return None
    # One frame filled twice has more filler than frame ("chose _ over _ for _"); two
    # statements that share most of their words and differ in a few are rewordings.
    frame = {w for tag, i1, i2, _, _ in opcodes if tag == "equal" for w in words_a[i1:i2] if w not in STOPWORDS}
    if len(frame) >= min(len(slots_a), len(slots_b)):
        return None
    return slots_a, slots_b


def _one_frame(stems: set[str]) -> set[str]:
    """``stems`` with each ``CONTRAST_FRAMES`` stem replaced by its group's first one
    in sorted order ("work" and "job" both read "career")."""
    for group in CONTRAST_FRAMES:
        if stems & group:
            stems = (stems - group) | {min(group)}
    return stems


def _has_marker(text: str, words: tuple[str, ...], no_space: tuple[str, ...]) -> bool:
    haystack = f" {normalise(text)} "
    runs = "\n".join(no_space_runs(text))
    return any(f" {m} " in haystack for m in words) or any(m in runs for m in no_space)


def states_change(text: str) -> bool:
    """Whether ``text`` says a state changed ("Moved to Berlin", "no longer", "now",
    "agora", "现在", "引っ越した")."""
    return _has_marker(text, CHANGE_MARKERS, NO_SPACE_CHANGE_MARKERS)


def time_ended(text: str) -> bool:
    """Whether ``text`` says its state has ended ("until 2023", "used to", "no longer",
    "já não", "不再")."""
    return _has_marker(text, TIME_ENDED, NO_SPACE_TIME_ENDED)


def reordered(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` use the same words with content words in another order
    ("Works as an accountant at Birch" / "Birch as an accountant at Works")."""
    words_a, words_b = tokens(a), tokens(b)
    if sorted(words_a) != sorted(words_b):
        return False
    return [w for w in words_a if w not in STOPWORDS] != [w for w in words_b if w not in STOPWORDS]


def words_of_stems(text: str, stems: Iterable[str]) -> list[str]:
    """The words of ``text`` (as written, lower-case) whose stems are in ``stems``, in
    order and each once: what an operator reads instead of stems ("bicycl" -> "bicycle").
    A stem no word of ``text`` has is left out."""
    wanted = set(stems)
    found: list[str] = []
    for word in tokens(text):
        base = word.removesuffix("'s")
        if base not in found and (stem(_singular(base)) in wanted or base in wanted):
            found.append(base)
    return found


def lost_negations(member: str, content: str, *, covered: Iterable[str] = ()) -> list[str]:
    """Negations of ``member`` that ``content`` drops, in order: a negation word or
    negative verb (or a negation marker of a script without spaces, "不", "ない") kept
    neither as the same word, nor inside a phrase the judge states as a synonym of words
    the content keeps (``covered``, from ``stated_cover``), nor by a sentence of ``content``
    of the member's polarity ("Hates jazz" keeps "Does not like jazz"). Empty when
    nothing is lost."""
    words = _polarity_words(member)
    if not words or polarity_key(member) in sentence_polarity_keys(content):
        return []
    phrases = list(covered)
    said = {w for w in words if covered_by(w, phrases)}
    have = set(_polarity_words(content)) | set(tokens(content))
    markers = [m for run in no_space_runs(member) for m in (*NO_SPACE_NEGATIONS, *NO_SPACE_NEGATIVE_VERBS) if m in run]
    content_runs = "\n".join(no_space_runs(content))
    lost = [w for w in dict.fromkeys(words) if w not in have and w not in said]
    if markers and any(w in ("not", "hates") for w in lost):
        lost = [w for w in lost if w not in ("not", "hates") or w in tokens(member)]
        lost += [m for m in dict.fromkeys(markers) if m not in content_runs and not covered_by(m, phrases)]
    return lost


def stated_cover(content: str, reason: str) -> list[str]:
    """The source-side phrases of the synonyms the judge states in ``reason`` whose
    other side ``content`` keeps (``equivalences``; either side may be the source's):
    what a merge may reword without losing it ("every six months" = "twice a year")."""
    have = content_stems(content) | {stem(t) for t in tokens(content)}
    covered = []
    for a, b in equivalences(reason):
        if _kept(b, content, have):
            covered.append(a)
        if _kept(a, content, have):
            covered.append(b)
    return covered


def covered_by(word: str, phrases: Iterable[str]) -> bool:
    """Whether ``word`` (a token, number value or marker) stands in one of ``phrases``."""
    for phrase in phrases:
        if word in tokens(phrase) or word in normalise(phrase) and no_space_runs(word):
            return True
        if word in numberwords.values(_ascii_fold(phrase)):
            return True
        if any(same_stem(stem(word), s) for s in content_stems(phrase)):
            return True
    return False


def invented_negations(content: str, members: Iterable[str], *, covered: Iterable[str] = ()) -> list[str]:
    """Negations of ``content`` that no member states (words, negative verbs, markers
    of scripts without spaces), in order, unless a stated synonym covers them
    (``covered``, from ``stated_cover``)."""
    members = list(members)
    said = set().union(*(set(_polarity_words(m)) | negations(m) for m in members)) if members else set()
    member_runs = "\n".join(r for m in members for r in no_space_runs(m))
    phrases = list(covered)
    found = [w for w in dict.fromkeys(negations(content)) if w not in said]
    found += [
        m
        for run in no_space_runs(content)
        for m in (*NO_SPACE_NEGATIONS, *NO_SPACE_NEGATIVE_VERBS)
        if m in run and m not in member_runs
    ]
    return [w for w in dict.fromkeys(found) if not covered_by(w, phrases)]


def vouched(reason: str, sources: Iterable[str]) -> list[str]:
    """The content-side phrases of the synonyms the judge states in ``reason`` whose other
    side one of ``sources`` holds: words a merge may use that no source wrote ("spent" =
    "spending")."""
    sources = list(sources)
    found = []
    for a, b in equivalences(reason):
        for x, y in ((a, b), (b, a)):
            if any(_kept(y, source, content_stems(source) | {stem(t) for t in tokens(source)}) for source in sources):
                found.append(x)
    return found
