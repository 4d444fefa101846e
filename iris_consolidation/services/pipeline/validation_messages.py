"""The words of ``validation``: each refusal's message (what the rule judge and the operator
read), each signal's concern (what the second look reads: the observation, with no
conclusion). Placeholders are filled by ``str.format`` with the members' aliases and words."""

NO_REASON = "The action gives no reason."
UNKNOWN_ID = "The action names {alias!r}, which is not a member of this cluster."
REPEATED_ID = "The action names {alias!r} more than once."
ALREADY_USED = "{alias!r} is already named by an earlier action; a member takes part in one action at most."
TOO_FEW = "A merge needs at least two members."
EMPTY_CONTENT = "The merged content is empty."
TOO_LONG = "The merged content has {length} characters; the limit is {limit}."
PROTECTED_RETIRED = (
    "{alias!r} is protected (pinned, created by the user or the assistant, or at the maximum generation) "
    "and cannot be retired or reworded."
)
AT_GENERATION_LIMIT = "{alias!r} is at the generation limit ({limit}) and takes part in no further consolidation."
TWO_PROTECTED = "A merge may keep at most one protected member; {aliases} are all protected."
LOST_DETAIL = "The merged content drops {detail!r}, found in {alias!r}."
INVENTED_DETAIL = "The merged content adds {detail!r}, which no member states."
INVENTED_WORDS = "The merged content says {words}, which no member states."
LOST_NEGATION = (
    "The merged content drops the negation {words} of {alias!r}; keep it, or state the synonym in the reason "
    '("word = synonym").'
)
INVENTED_NEGATION = "The merged content says {words}, a negation that no member states."
POLARITY_DIFFERS = "{a!r} and {b!r} differ in negation; a statement never merges with its opposite."
#: Appended to a signal's message: the words an operator (and the second look) should read.
DIFFERING_WORDS = " The words that differ: {words}."
NAMES_DIFFER = "{a!r} and {b!r} name different people or things ({names}); they stay apart."
NUMBERS_DIFFER = "{a!r} and {b!r} give different numbers ({numbers}); they stay apart."
ROLE_SWAP = "{a!r} and {b!r} use the same words with names in another order (a role swap); they stay apart."
CHAINED = "{a!r} and {b!r} share no word or detail; a merge of three or more members must not chain unrelated facts."
SIDE_BY_SIDE = (
    "The merged content sets {a!r} and {b!r} side by side, and they {why}; a merge fuses restatements of one "
    "fact into one statement, it does not join different facts."
)
#: What ``SIDE_BY_SIDE`` says the two members do (``_side_by_side``).
SIDE_DISTINCT = "hold different names, numbers, dates, roles or words in one frame"
SIDE_OPPOSED = "say the same thing where one of them negates it, ends it or reports a change"
SIDE_CHAINED = "share no word, name or number with each other"
BOTH_VALUES = (
    "The merged content keeps {words_a} of {a!r} and {words_b} of {b!r}, two values where the members "
    "differ; a merge states one fact, not both values of one thing."
)
REORDERED = "The merged content uses the words of {alias!r} in another order, which can swap who does what."
TIME_SPAN_DIFFERS = "{a!r} and {b!r} cover different spans of time (one says its state ended); they stay apart."
CONTRAST = "{a!r} says {words_a} where {b!r} says {words_b} in the same frame; distinct facts stay apart."
DETAILS_ONLY = (
    "{a!r} and {b!r} share only {details} and no word of what they say about it; two facts about one name stay "
    'apart (if they restate each other, state the synonyms in the reason: "word = synonym").'
)
STATE_CHANGED = (
    "{a!r} reports a change ({marker}) and {b!r} does not; a change is superseded or kept, never merged away."
)
LOST_WORDS = (
    "The merged content drops {words}, stated by {alias!r}; keep them, or state each synonym in the reason "
    '("word = synonym").'
)
SUPERSEDE_SELF = "A supersede cannot retire its own 'new' member."
SUPERSEDE_EMPTY = "A supersede needs at least one 'old' member."
SUPERSEDE_BACKWARDS = "{old!r} was stated after {new!r}; the newer statement never retires in favour of an older one."
SUPERSEDE_NO_CHANGE = (
    "{new!r} does not say that anything changed (e.g. moved, now, no longer); {old!r} stays as a fact of its own."
)
SUPERSEDE_OUTCOME = (
    "{new!r} says no change word; it may state the outcome of the plan or effort of {old!r}, or another fact."
)
INSTRUCTION = "{alias!r} is an instruction to the model, not a fact about the person; it is kept as it is."
SUPERSEDE_UNRELATED = (
    "{new!r} shares no word, name or number with {old!r}; a later truth about another attribute retires nothing."
)
SUPERSEDE_MIXED = (
    "{a!r} and {b!r} are different statements; one change supersedes one statement (and its restatements), "
    "not several facts at once."
)
SUPERSEDE_SEVERAL = (
    "{a!r} and {b!r} are different statements and neither is an earlier step of a change (a change, an "
    "event or a plan); one change supersedes one statement (and its restatements) and the steps before it."
)
MERGED_CONTENT = "merged content"

# What a signal says to the second look and the operator: the observation, in plain
# words, with no conclusion (the refusal messages above state the rule judge's).
CONCERN_POLARITY = "{a} and {b} differ in negation: {words} stands in only one of them."
CONCERN_NAMES = "{a} and {b} name different people, places or things: {names}."
CONCERN_NUMBERS = "{a} and {b} give different numbers: {numbers}."
CONCERN_DATES = "{a} and {b} give different days or months: {names}."
CONCERN_ROLE_SWAP = "{a} and {b} use the same words with the names in another order."
CONCERN_TIME_SPAN = "{a} says a state ended ({marker}) and {b} does not."
CONCERN_STATE_CHANGED = "{a} reports a change ({marker}) and {b} does not."
CONCERN_CONTRAST = "{a} says {words_a} where {b} says {words_b}; their other words are the same."
CONCERN_CHAINED = "{a} and {b} share no word, name or number."
CONCERN_DETAILS_ONLY = "{a} and {b} share only {details}."
CONCERN_OUTCOME = (
    "{new} says no change word; {old} states a plan or an effort under way that {new} may be the outcome of."
)
CONCERN_MIXED = "{a} and {b}, both to be retired, say different things."
