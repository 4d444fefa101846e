"""App settings: one flat, prefixed Django setting per entry, read lazily.

``app_settings.SIMILARITY_THRESHOLD`` reads ``settings.IRIS_CONSOLIDATION_SIMILARITY_THRESHOLD``
or its default below (for the threshold: the default of the embedding model in use).
Values are cached and the cache is cleared on ``setting_changed``, so
``override_settings`` and pytest-django's ``settings`` fixture work. Nothing here
reads the environment: ``project/settings.py`` maps environment variables to settings.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

PREFIX = "IRIS_CONSOLIDATION_"

DEFAULTS: dict[str, Any] = {
    # Cosine similarity at or above which two truths are candidates for one cluster.
    # None (unset): the default of the embedding model, see THRESHOLD_BY_EMBEDDING_MODEL
    # below. The threshold only finds candidates; the judge and validator decide.
    "SIMILARITY_THRESHOLD": None,
    # Largest cluster sent to the judge, seed included.
    "MAX_CLUSTER_SIZE": 5,
    # Smallest cluster worth judging.
    "MIN_CLUSTER_SIZE": 2,
    # After the greedy clusters, offer each truth the greedy pass left out (its neighbours
    # all taken by earlier seeds) with its nearest neighbour at or above the threshold
    # (services/pipeline/clustering.py; oracle recall of the PersonaChat pairs
    # at 0.40 0.568 -> 0.633, for 1.6 more clusters per 100 truths on LoCoMo, 7.4 on MSC).
    "NEAREST_PAIRS": True,
    # Phase 1 by neighbourhoods (services/pipeline/neighbourhoods.py): each seed beside its
    # NEIGHBOURHOOD_K nearest truths at or above the threshold and, with the lexical arm,
    # its NEIGHBOURHOOD_LEXICAL_K nearest by Jaccard of words (at least
    # NEIGHBOURHOOD_JACCARD_FLOOR), joined in NEIGHBOURHOOD_ROUNDS rounds into groups of at
    # most NEIGHBOURHOOD_GROUP_SIZE; SAME_ATTRIBUTE adds each attribute's truths ("home",
    # "work"...) together. False: greedy seed clusters (MAX_CLUSTER_SIZE, NEAREST_PAIRS).
    # Chosen with manage.py eval_recall (docs/benchmarks.md, "Recall of phase 1").
    "NEIGHBOURHOODS": True,
    "NEIGHBOURHOOD_K": 4,
    "NEIGHBOURHOOD_LEXICAL_K": 2,
    "NEIGHBOURHOOD_JACCARD_FLOOR": 0.25,
    "NEIGHBOURHOOD_GROUP_SIZE": 10,
    "NEIGHBOURHOOD_ROUNDS": 4,
    "SAME_ATTRIBUTE": True,
    # django-q2 timeouts in seconds: per-user phase 1 task, per-cluster phase 2 task.
    "USER_JOB_TIMEOUT": 60,
    "CLUSTER_JOB_TIMEOUT": 120,
    # Cluster (judge) tasks started per minute across all workers and machines (the
    # count lives in the database); 0 for no limit. Phase 1 is not limited.
    "JOBS_PER_MINUTE": 10,
    # Truths at this generation are never consolidated again (a hard limit).
    "MAX_GENERATION": 5,
    # Seconds during which a rate-limited cluster task keeps being re-queued.
    "RETRY_WINDOW": 7200,
    # Seconds over which JOBS_PER_MINUTE is counted (a sliding window). 60 gives the
    # per-minute limit the name says; tests shorten it to stay fast.
    "RATE_LIMIT_PERIOD": 60,
    # Deliveries of one queued job that may end in a timeout, a dead worker or an
    # unexpected error before the job is recorded as failed. Rate limits do not count.
    "JOB_ATTEMPTS": 3,
    # Cron expression of the weekly scheduled run, in TIME_ZONE (Sunday 05:00); "" for none.
    "SCHEDULE_CRON": "0 5 * * 0",
    # Seconds a scheduled run's no-overlap lock lasts without progress before another
    # scheduled run may take it over (its holder is taken for dead). Renewed by every
    # finished job and by the recovery sweep; above RETRY_WINDOW so a run waiting on a
    # provider's rate limit keeps its lock.
    "SCHEDULE_LOCK_TTL": 10800,
    # Most truths one run may retire; the rest wait for the next run.
    "MAX_RETIREMENTS_PER_RUN": 1000,
    # Clusters of one user judged in one model call (wire contract v2), and carried by
    # one phase 2 task. 8 clusters of up to 5 truths keep a call's data near 1,000
    # tokens, and a reply near 8 x 80 tokens, far inside any model's limits.
    "CLUSTERS_PER_CALL": 8,
    # USD one run may spend on judge calls (litellm's price map); None: no cap. Once
    # the run's recorded spend reaches it, no further call is made and the clusters
    # left are deferred to the next run. The live settings override it.
    "MAX_COST_PER_RUN": None,
    # "rules" (offline, deterministic) or "llm" (litellm, model below).
    "JUDGE": "rules",
    # Dotted paths of the judge clients, by JUDGE value.
    "JUDGE_CLIENTS": {
        "rules": "iris_consolidation.llm.rules.RuleJudge",
        "llm": "iris_consolidation.llm.litellm_client.LiteLLMJudge",
    },
    # litellm model name of the LLM judge.
    "MODEL": "anthropic/claude-sonnet-4-5",
    # Base URL of any OpenAI-compatible server (use MODEL "openai/<name>"); "" for none.
    "LLM_API_BASE": "",
    # Seconds one judge call may take.
    "LLM_TIMEOUT": 60.0,
    # Attempts for a malformed or truncated judge reply before the cluster is bisected.
    "LLM_ATTEMPTS": 2,
    # What a model's action gets when it passes every invariant but a word-level reading
    # flags it (negation differs, a change on one side only, ...): "verify" asks the model
    # a second look in one call per batch and applies only what it confirms; "refuse"
    # refuses it (as the rule judge always does); "accept" applies it with the signals
    # recorded. The live settings override it.
    "RISK_POLICY": "verify",
    # litellm model name of the second look; "" for the judge's own MODEL.
    "VERIFY_MODEL": "",
    # "local" (all-MiniLM-L6-v2 int8 ONNX, offline, English), "local-multilingual" (Universal
    # Sentence Encoder multilingual v3, offline, 16 languages; the [multilingual] extra) or a
    # litellm embedding model name (docs/configuration.md, "Truths in other languages").
    "EMBEDDING_MODEL": "local",
    # Truths embedded per batch in phase 1.
    "EMBEDDING_BATCH_SIZE": 256,
    # Longest merged content accepted from a judge, in characters.
    "MAX_CONTENT_LENGTH": 1000,
    # Working memory of phase 1's neighbour search in MB (similarity tiles, float64
    # recomputation); the user's vectors come on top (1,536 bytes per truth).
    "PHASE1_MEMORY_MB": 256,
    # Seeds from which phase 1 finds pairs with a faiss IVF index instead of exact
    # blocked products (measured switch point: docs/benchmarks.md).
    "PHASE1_APPROXIMATE_FROM": 50000,
    # Most members one truth is compared with as a seed: its most similar ones at or
    # above the threshold. Greedy clustering needs MAX_CLUSTER_SIZE - 1 free ones, so 64
    # changes nothing unless 60 of a seed's 64 nearest are already in clusters; it bounds
    # the pairs (and memory) of a dense user, where every truth is near thousands (20,000
    # templated truths at 0.40 gathered over 20 million pairs, 2 GB, without it).
    "PHASE1_NEIGHBOURS": 64,
    # Phase 1 of small users in shared tasks (services/queue/dispatch.py, user_batches):
    # users with at most PHASE1_BATCH_MAX_TRUTHS live truths are planned up to
    # PHASE1_USERS_PER_TASK to one django-q2 task (and at most 10,000 truths in all, what
    # one USER_JOB_TIMEOUT covers), planned together in a few queries (run/plan), each on
    # its own job; larger users get a task each. A run in process plans them the same way.
    # A task costs its broker round trip, its claim and its run refresh whatever it plans.
    # 1 user per task, or 0 truths: a task per user.
    "PHASE1_USERS_PER_TASK": 50,
    "PHASE1_BATCH_MAX_TRUTHS": 1000,
    # pgvector hnsw.ef_search for neighbour queries: above pgvector's 40 for recall
    # (docs/benchmarks.md, "Measured constants").
    "HNSW_EF_SEARCH": 100,
    # --- incremental passes and live settings (the live settings record overrides these) ---
    # Days a "--since last" window reaches back when no run has written a checkpoint yet.
    "DAYS_FALLBACK": 1,
    # Whether scheduled passes run at all (manual runs always do).
    "ENABLED": True,
    # Least hours between two scheduled runs: a SCHEDULE_CRON slot sooner than this after
    # the last scheduled run started is skipped. 0: every slot runs (the cron is the cadence).
    "SCHEDULE_INTERVAL_HOURS": 0,
    # Scheduled passes only preview (dry run) and change no truth.
    "SCHEDULED_DRY_RUN_ONLY": False,
    # Usernames or ids of the only users consolidated; empty: everyone.
    "USER_ALLOWLIST": [],
    # --- hygiene stages (services/hygiene/) ---
    # Days over which an unused truth's relevance halves at decay weight 1 (loopctl's
    # half-life); also the half-life of the quality score's recency term.
    "HALF_LIFE_DAYS": 14.0,
    # Decay weight by kind: a weight w makes the effective half-life HALF_LIFE_DAYS / w.
    # Kinds not listed decay at 1. A string "kind=w,kind=w" (the environment's form) or a dict.
    "DECAY_WEIGHTS": "fact=0.5,strategy=0.5,preference=0.5,insight=0.75,error_pattern=0.75,trajectory=1,working=2",
    # Jaccard similarity of two truths' token sets at or above which the lexical arm
    # makes them candidates (loopctl's greedy Jaccard clustering).
    "JACCARD_THRESHOLD": 0.6,
    # Relevance or quality below which the prune stage retires a truth.
    "PRUNE_FLOOR": 0.05,
    # Most of a user's live truths one pass may prune, as a share in [0, 1]: the prune
    # stage retires the lowest-scoring candidates up to floor(share x live truths) and
    # refuses (and reports) the rest, so no setting or import wipes a memory at once.
    # 10%: a user of 100 truths loses at most 10 a pass. The live settings override it.
    "MAX_PRUNE_SHARE": 0.10,
    # Modes of the stages of a pass: "off", "report" (listed, nothing changed) or "apply".
    # Stages that retire truths default to report. Decay
    # too: it rewrites every truth's relevance on every pass, with no audit row and no undo
    # (the previous value is not kept), and prune recomputes the post-decay relevance at
    # the pass time whether decay wrote it or not (docs/pipeline.md, "Stages of a pass").
    "NOISE": "report",
    "DECAY": "report",
    "LEXICAL": "apply",
    "SEMANTIC": "apply",
    "PRUNE": "report",
    # --- mining, relocation, promotion (services/hygiene/mining.py, relocation.py, promotion.py) ---
    # Mining adds truths and retires none, so it applies by default; relocation retires
    # (a pointer truth replaces it), so it reports; promotion writes append-only rules
    # that are injected every turn, so it reports until an operator switches it on.
    "MINE": "apply",
    "RELOCATE": "report",
    "PROMOTE": "report",
    # Lowest confidence a mined truth needs to be added: "high" (default) or "medium";
    # "low" is never added (rho's mining SOP).
    "MINING_CONFIDENCE": "high",
    # Most truths the mine stage adds per user per pass, the most recent sessions' first; the
    # rest are proposed again at the user's next pass (mining.carried, novelty.users_with_carried).
    "MAX_NEW_TRUTHS": 10,
    # Cosine similarity to an existing live truth at or above which a mined truth is a
    # near-duplicate and skipped; below it, a close one is added and the semantic arm of
    # the same pass clusters it with the existing truth for the judge. all-MiniLM-L6-v2
    # puts real restatements at 0.4-0.75 and near-verbatim ones above 0.9.
    "MINING_DUPLICATE_SIMILARITY": 0.9,
    # Existing truths shown to the mining model with each session: the nearest to each of the
    # person's messages in turn (novelty.KNOWN_PER_MESSAGE each), at most this many.
    "MINING_KNOWN_TRUTHS": 30,
    # Mining calls of one user made at once (threads waiting on the model): 28-30 sessions at
    # 2 s a call fit a 60 s phase-1 task only when several run together. 1: one at a time.
    "MINING_CONCURRENCY": 4,
    # Truths at least this long (characters) are reference-heavy by the relocation rule
    # (a truth is a sentence or two; rho's SOP moves long histories and runbooks out).
    "RELOCATE_MIN_CHARS": 280,
    # Corroborations from which a truth is offered to the model as a standing instruction.
    "PROMOTE_THRESHOLD": 3,
}


#: Default SIMILARITY_THRESHOLD per EMBEDDING_MODEL, chosen by measurement.
#: "local" (all-MiniLM-L6-v2): with a judge that answers exactly like the human labels
#: of the PersonaChat same/different pairs (``calibrate_threshold``), recall of
#: the "same" pairs is 0.040 at 0.75 (17 clusters for 648 truths): real restatements
#: sit at 0.4-0.75 with this model, far below the 0.81-0.91 of close paraphrases; 0.633
#: at 0.40 (0.775 of the pairs in one cluster, with NEAREST_PAIRS) with precision 1.000.
#: Judge calls per 100 truths: 2.6 at 0.75, 37.7 at 0.40, or 2.2 and 10.0 batched by 8
#: clusters of a user; a truth joins one greedy cluster at most (and one pair if left
#: out), so the cost flattens below 0.50. See docs/configuration.md, "Choosing the threshold", for the
#: curve and the LoCoMo and MSC cluster counts.
#: "local-multilingual" (Universal Sentence Encoder multilingual v3, projected to 384):
#: the threshold at which a dry run's phase 1 makes about the judge calls per 100 LoCoMo
#: truths of "local" at 0.40 (``benchmarks/embedders.py``; docs/benchmarks.md, "Embedders
#: for other languages").
THRESHOLD_BY_EMBEDDING_MODEL: dict[str, float] = {"local": 0.40, "local-multilingual": 0.45}
#: Iris's threshold, kept for any other (remote, litellm) embedding model: its scale of
#: cosine similarity is unknown here, so nothing was measured to move it.
REMOTE_EMBEDDING_THRESHOLD = 0.75


def default_threshold(embedding_model: str) -> float:
    """The similarity threshold used when SIMILARITY_THRESHOLD is unset, for ``embedding_model``
    (an EMBEDDING_MODEL value): the measured local default, else ``REMOTE_EMBEDDING_THRESHOLD``."""
    return THRESHOLD_BY_EMBEDDING_MODEL.get(embedding_model, REMOTE_EMBEDDING_THRESHOLD)


class AppSettings:
    """Lazy reader of the app's settings; unknown names raise ``AttributeError``."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in DEFAULTS:
            raise AttributeError(f"Unknown iris_consolidation setting: {name}")
        if name not in self._cache:
            value = getattr(settings, PREFIX + name, DEFAULTS[name])
            if name == "SIMILARITY_THRESHOLD" and value is None:
                value = default_threshold(self.EMBEDDING_MODEL)
            self._cache[name] = value
        return self._cache[name]

    def reset(self) -> None:
        """Forget cached values (called on ``setting_changed``)."""
        self._cache.clear()


app_settings = AppSettings()


@receiver(setting_changed)
def _reset_app_settings(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith(PREFIX):
        app_settings.reset()
