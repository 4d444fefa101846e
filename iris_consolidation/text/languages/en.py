"""English: the default language of truths, and the only one with a number grammar,
a word-order vocabulary and the stems of the synonym and contrast groups."""

from __future__ import annotations

from types import MappingProxyType

from .base import Language

ENGLISH = Language(
    code="en",
    stemmer="english",
    contractions=(
        (r"\bcan't\b", "can not"),
        (r"\bwon't\b", "will not"),
        (r"\bcannot\b", "can not"),
        (r"n't\b", " not"),
        (r"'m\b", " am"),
        (r"'re\b", " are"),
        (r"'ve\b", " have"),
        (r"'ll\b", " will"),
        (r"'d\b", " would"),
    ),
    stopwords=frozenset(
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
    ),
    articles=frozenset({"a", "an", "the"}),
    not_names=frozenset(
        "i the a an he she they we you it his her their my our your this that these those is was "
        "has have had does did do user users likes loves prefers works lives enjoys".split()
    ),
    months=frozenset(
        "january february march april may june july august september october november december "
        "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday "
        "saturday sunday weekend weekday".split()
    ),
    negations=frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without"}),
    negative_verbs=frozenset(
        """hate hates hated hating dislike dislikes disliked detest detests detested loathe loathes
        loathed despise despises despised avoid avoids avoided abhor abhors abhorred""".split()
    ),
    negative_phrases=("can not stand", "could not stand", "can not bear", "could not bear"),
    # "Cannot wait to move out" restates "Is excited to leave home", "Nothing beats a hot
    # cup of java" restates "Is a huge coffee lover"; "Can't wait to retire" / "Can wait
    # to retire" still differ (eager / wait: a contrast).
    positive_idioms=(
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
    ),
    ended_negations=("no longer", "no more"),
    preference_words=frozenset(
        "like likes liked love loves loved enjoy enjoys enjoyed prefer prefers preferred "
        "favourite favourites favorite favorites fond".split()
    ),
    # "Left St Mary's and now works at a hospice"; moves by another name ("Immigrated within
    # the past few years" restates "Recently moved to this country").
    reported_changes=(
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
        "immigrated",
        "emigrated",
        "relocated",
        # A thing swapped, repaired or broken, a role changed ("Swapped to a standing desk",
        # "The car broke down again", "Was promoted to lead designer").
        "swapped",
        "repaired",
        "broke down",
        "broken down",
        "promoted",
        "demoted",
        "renamed",
        "upgraded",
        "downgraded",
    ),  # fmt: skip
    # Events let a supersede through but do not block a merge: "Enjoys visiting new places"
    # restates "Likes to travel".
    change_events=(
        "not anymore",
        "moves",
        "became",
        "becomes",
        "started",
        "new",
        "updated",
        "married",
        "divorced",
        "broke up",
        "split up",
        "separated",
        "graduated",
        "retired",
        "sold",
        "was moved",
        # An effort under way that ended ("Finished restoring the car").
        "finished",
        "completed",
        # Informal corrections: the later statement says the earlier one was wrong.
        "actually",
        "was wrong",
        "were wrong",
        "correction",
        "corrected",
        "turns out",
        "turned out",
        "final",
    ),  # fmt: skip
    time_ended=(
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
    ),  # fmt: skip
    frame_phrases=("used to", "no longer", "any more", "no more", "gave up", "has given up"),
    frame_words=frozenset("until till formerly former previously anymore quit stopped now".split()),
    job_frames=("works as", "worked as", "working as", "employed as", "has a job as"),
    light_verbs=frozenset("go goes went going gone".split()),
    # "Birthday is on 14 March" / "Was born on March 14".
    synonym_groups=(
        frozenset({"birthday", "born", "birth"}),
        frozenset({"best", "favourit", "favorit"}),
    ),
    # "Work as a nurse" and "My job is nursing" are one frame with nothing swapped.
    contrast_frames=(
        frozenset({"job", "work", "employ", "profess", "occup", "career"}),
        frozenset({"move", "reloc", "immigr", "emigr", "live"}),
        frozenset({"eager", "excit"}),
    ),
    phrase_equivalences=(
        # Kinship stated from the other side: the parent of a boy has a son.
        ("father of a boy", "son"),
        ("mother of a boy", "son"),
        ("parent of a boy", "son"),
        ("father of a girl", "daughter"),
        ("mother of a girl", "daughter"),
        ("parent of a girl", "daughter"),
        # Running for exercise, and the morning.
        ("jog", "run"),
        ("jogging", "running"),
        ("before noon", "morning"),
        # A language: speaking it fluently is being fluent in it.
        ("speaks fluent", "fluent in"),
    ),
    units=MappingProxyType(
        {
            "zero": 0,
            "one": 1,
            "two": 2,
            "three": 3,
            "four": 4,
            "five": 5,
            "six": 6,
            "seven": 7,
            "eight": 8,
            "nine": 9,
            "ten": 10,
            "eleven": 11,
            "twelve": 12,
            "thirteen": 13,
            "fourteen": 14,
            "fifteen": 15,
            "sixteen": 16,
            "seventeen": 17,
            "eighteen": 18,
            "nineteen": 19,
        }
    ),  # fmt: skip
    tens=MappingProxyType(
        {
            "twenty": 20,
            "thirty": 30,
            "forty": 40,
            "fifty": 50,
            "sixty": 60,
            "seventy": 70,
            "eighty": 80,
            "ninety": 90,
        }
    ),  # fmt: skip
    scales=MappingProxyType({"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}),
    ordinals=MappingProxyType(
        {
            "first": 1,
            "second": 2,
            "third": 3,
            "fourth": 4,
            "fifth": 5,
            "sixth": 6,
            "seventh": 7,
            "eighth": 8,
            "ninth": 9,
            "tenth": 10,
            "eleventh": 11,
            "twelfth": 12,
            "thirteenth": 13,
            "fourteenth": 14,
            "fifteenth": 15,
            "sixteenth": 16,
            "seventeenth": 17,
            "eighteenth": 18,
            "nineteenth": 19,
            "twentieth": 20,
            "thirtieth": 30,
            "fortieth": 40,
            "fiftieth": 50,
            "sixtieth": 60,
            "seventieth": 70,
            "eightieth": 80,
            "ninetieth": 90,
            "hundredth": 100,
            "thousandth": 1000,
        }
    ),  # fmt: skip
    repeats=MappingProxyType({"once": 1, "twice": 2, "thrice": 3}),
    inexact=frozenset({"couple", "dozens", "half", "hundreds", "thousands"}),
    prepositions=frozenset(
        """about above across after against along amid among around at before behind below beneath beside
        besides between beyond by despite during for from in inside into near of off on onto out outside over
        past per since through throughout till to toward towards under until unto up upon via with within""".split()
    ),
    time_words=frozenset(
        """every each daily weekly monthly yearly annually nightly hourly often usually sometimes occasionally
        regularly frequently rarely seldom once twice today tomorrow yesterday tonight recently lately nowadays
        mornings evenings afternoons nights weekends weekdays""".split()
    ),
    scope_words=frozenset(
        """only just even not no never always almost nearly hardly barely scarcely also too either neither nor
        all both mostly mainly merely solely especially""".split()
    ),
    conjunctions=frozenset({"and", "or"}),
    copulas=frozenset({"is", "was"}),
    definite=frozenset({"the", "my", "his", "her", "their", "our", "your"}),
    indefinite=frozenset({"a", "an", "some", "any", "many", "most", "few", "several", "all", "every", "each", "no"}),
    # A plan or an effort under way, whose later outcome replaces it (``Language.plans``).
    plans=(
        "plans",
        "plans to",
        "planning",
        "wants to",
        "hopes to",
        "hoping to",
        "would",
        "will",
        "going to",
        "intends",
        "considering",
        "thinking about",
        "thinking of",
        "exploring",
        "looking into",
        "trying to",
        "working on",
        "currently",
        "preparing",
        "aims to",
        "training for",
        "training to",
        "researching",
        "applying for",
        "applied for",
        "saving for",
        "saving up",
        "studying for",
    ),
    # Set long before it was said: no outcome of a plan stated earlier.
    long_ago=(
        "as a child",
        "as a kid",
        "as a boy",
        "as a girl",
        "as a teenager",
        "in childhood",
        "growing up",
        "when i was young",
        "when i was younger",
        "when i was little",
        "when i was a child",
        "when i was a kid",
        "years ago",
        "decades ago",
        "long ago",
    ),
    # Addressed to the model, not a fact about the person.
    instructions=(
        "ignore all previous instructions",
        "ignore previous instructions",
        "ignore the previous instructions",
        "ignore all prior instructions",
        "ignore the above",
        "disregard all previous instructions",
        "disregard previous instructions",
        "forget all previous instructions",
        "forget your instructions",
    ),
    # Single-valued attributes of a person and their cues (``Language.attributes``).
    attributes={
        "home": ("lives in", "live in", "living in", "moved to", "moved from", "moving to", "relocated",
                 "relocating", "resides", "based in", "home is in", "new apartment", "new house"),
        "work": ("works at", "works as", "works for", "work at", "work as", "working at", "working as",
                 "job", "employer", "employed", "hired", "quit", "laid off", "retired", "new role",
                 "position as", "occupation", "profession", "promoted to"),
        "relationship": ("married", "engaged", "divorced", "dating", "girlfriend", "boyfriend", "husband",
                         "wife", "fiancé", "fiance", "widow", "broke up", "relationship"),
        "name": ("name is", "goes by", "to be called", "changed her name", "changed his name",
                 "changed their name", "renamed"),
        "age": ("years old", "year old", "birthday", "was born", "age of"),
        "diet": ("vegetarian*", "vegan*", "pescatarian", "eat meat", "eats meat", "diet", "keto", "gluten"),
        "children": ("children", "kids", "pregnant", "expecting a baby", "only child"),
        "pets": ("dog", "dogs", "cat", "cats", "pet", "pets", "puppy", "kitten", "hamster", "parrot"),
        "phone": ("phone", "iphone", "pixel", "android", "smartphone"),
        "allergies": ("allerg*",),
        "appointment": ("appointment",),
        "studies": ("studies at", "studying at", "student at", "graduated", "enrolled", "degree in", "major in"),
    },
)
