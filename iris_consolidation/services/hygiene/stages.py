"""The stages of a pass around the judge: mine, noise, decay, lexical, semantic, relocate,
promote, prune.

Order (loopctl's consolidate_entries, rho's SOP), per user: ``noise`` (retire what
should never have been stored), ``decay`` (relevance), then the two candidate arms
``lexical`` + ``semantic`` (clusters for the judge, interleaved), and after every
cluster of the run is judged, ``prune`` (below the floor). Each stage has a mode:
``off``, ``report`` (listed in the run's report, nothing changed; for the arms: clusters
counted, not judged) or ``apply``. A dry run turns every ``apply`` into ``report``
(the arms' clusters are still judged and recorded as previews, as always).

``mine`` (``mining.py``), ``relocate`` (``relocation.py``) and
``promote`` (``promotion.py``) run in phase 1 too, for each user, outside its
transaction (they may call a model): mine first (so that new truths are cleaned,
decayed and clustered in the same pass), relocate and promote once the clusters are
built, not after the merges: the end of a run (``close_run``) holds the run's lock, where
no model call may run; a truth relocated here leaves its cluster stale for phase 2, which
re-reads every member under a lock. Their model calls use the run's LLM judge's client
(``ask_json``); with the rule judge, mining uses the offline extractor, relocation the rule
alone, and promotion reports "skipped: no LLM".

Modes come from the run's stored settings (``run_settings.run_modes``:
live settings over ``IRIS_CONSOLIDATION_NOISE`` / ``_DECAY`` / ``_LEXICAL`` /
``_SEMANTIC`` / ``_PRUNE``), narrowed by ``consolidate_truths --only``. Each stage writes
one ``StageResult`` per (run, user, stage): counts, seconds and up to
``StageResult.MAX_FINDINGS`` findings; a second delivery of the same work finds its
row and does nothing again.

Each stage is one entry of ``REGISTRY`` (``Stage``: name, ``When`` it runs, whether it
calls a model, what its report lists); the pass runs each ``When`` with ``run_at``.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.db.models import Q

from ...conf import app_settings
from ...embeddings import Embedder
from ...exceptions import JudgeMisconfigured
from ...llm import get_judge_client
from ...llm.base import NoiseCandidate, NoiseReply
from ...models import ConsolidationRun, LineageEvent, RetiredReason, StageMode, StageResult, Truth
from ...run_settings import prune_share, run_modes
from ..pipeline import clustering, forecast, neighbourhoods, vectors
from . import budget, decay, lexical, mining, noise, noise_rules, novelty, promotion, prune, relocation, retire
from .passes import UserPass, pass_time
from .withheld import is_withheld

logger = logging.getLogger(__name__)

ACTOR = "hygiene:{stage}"


def _record(
    run: ConsolidationRun, user_id: int, stage: str, mode: str, *, examined: int, affected: int, applied: int,
    seconds: float, findings: list[dict[str, Any]], immediate: bool = False, refused: int = 0,
    shared: UserPass | None = None,
) -> StageResult:
    """Record a stage's result: at once (``immediate``, or no buffered ``shared`` pass), or
    with the pass's other results (``UserPass.flush``)."""
    if shared is not None and shared.buffered and not immediate:
        result = StageResult(
            run=run, user_id=user_id, stage=stage, mode=mode, examined=examined, affected=affected,
            applied=applied, refused=refused, seconds=round(seconds, 6), findings=findings[: StageResult.MAX_FINDINGS],
        )
        shared.pending.append(result)
        shared.results[stage] = result
        return result
    try:
        with transaction.atomic():
            result = StageResult.objects.create(
                run=run, user_id=user_id, stage=stage, mode=mode, examined=examined, affected=affected,
                applied=applied, refused=refused, seconds=round(seconds, 6),
                findings=findings[: StageResult.MAX_FINDINGS],
            )
    except IntegrityError:
        result = StageResult.objects.get(run=run, user_id=user_id, stage=stage)
    if shared is not None:  # later stages of the pass read it there (mine's changes: ``candidate_clusters``)
        shared.results[stage] = result
    return result


def _start(
    run: ConsolidationRun, user_id: int, stage: str, shared: UserPass | None
) -> tuple[str, StageResult | None]:
    """The stage's mode for ``run`` and its result if already recorded (a second delivery;
    read from the ``shared`` pass if given)."""
    mode = run_modes(run)[stage]
    if mode == StageMode.OFF:
        return mode, None
    if shared is not None:
        return mode, shared.results.get(stage)
    return mode, StageResult.objects.filter(run=run, user_id=user_id, stage=stage).first()


def noise_classifier(run: ConsolidationRun) -> Callable[[Sequence[NoiseCandidate]], NoiseReply] | None:
    """The model's noise classification for ``run`` (``LiteLLMJudge.classify_noise``), or
    None: the run's judge asks no model (the rule judge), or the judge in the settings is
    not the run's (a run keeps the judge it was made with). While a pass is forecast: the
    forecast's recorder (``forecast.StageRecorder``: the request is counted, not sent)."""
    recorder = forecast.recorder()
    if recorder is not None:
        return recorder.classify_noise
    if run.judge_kind == ConsolidationRun.JudgeKind.RULES or is_withheld("noise"):
        return None
    try:
        client = get_judge_client()
    except ImproperlyConfigured:
        return None
    if not getattr(client, "calls_model", False) or (run.judge and client.name != run.judge):
        return None
    return getattr(client, "classify_noise", None)


def _noise_rows(user_id: int, shared: UserPass | None) -> list[tuple[int, str, str]]:
    """``(id, content, kind)`` of the user's consolidatable truths but preferences, in
    (created_at, id) order: from the ``shared`` pass if given, else one query."""
    if shared is not None:
        return [(row.id, row.content, row.kind) for row in shared.consolidatable() if row.kind != "preference"]
    return list(
        Truth.objects.for_user(user_id).consolidatable(max_generation=app_settings.MAX_GENERATION)
        .exclude(kind="preference").order_by("created_at", "id").values_list("id", "content", "kind")
    )


def run_noise(run: ConsolidationRun, user_id: int, *, shared: UserPass | None = None) -> StageResult | None:
    """The noise stage for one user (see ``noise.py``); retires in apply mode only.

    With the rule judge only the detector's sure tier retires (its suspects are listed,
    ``retires`` false). With an LLM judge both tiers go to the model (``noise.confirm``,
    in report mode too) and only those it confirms count; its spend is added to the run.
    Each finding says its ``tier``, whether the stage ``retires`` it (or would, in report
    mode) and, with a model, its verdict and reason; the audit row's reason says the
    category, the tier and the model's reason.
    """
    mode, existing = _start(run, user_id, "noise", shared)
    if mode == StageMode.OFF or existing is not None:
        return existing
    started = time.monotonic()
    rows = _noise_rows(user_id, shared)
    # Truths are built only for the texts the detector flags (few): the same findings as
    # ``find_noise`` over every truth, without a model instance per clean text.
    matches = noise_rules.detect_all([content for _, content, _ in rows])
    flagged = [Truth(id=pk, content=content, kind=kind)
               for (pk, content, kind), match in zip(rows, matches, strict=True) if match]
    found = noise.find_noise(flagged)
    classify = noise_classifier(run) if found else None
    confirmation = None
    if classify is not None:
        confirmation = noise.confirm(
            found, classify, may_call=lambda: budget.may_call(run, "noise", getattr(classify, "__self__", None))
        )
        ConsolidationRun.objects.filter(pk=run.pk).add_spend(confirmation.spend)
    retiring = confirmation.confirmed(found) if confirmation is not None else noise.sure_only(found)
    retiring_ids = {t.pk for t, _ in retiring}
    applied: list[int] = []
    if mode == StageMode.APPLY and retiring:
        note = {t.pk: f"{m.category} ({m.tier})" for t, m in retiring}
        if confirmation is not None:
            note = {t.pk: f"{note[t.pk]}; model: {confirmation.decisions[t.pk][1]}" for t, _ in retiring}
        applied = retire.retire(
            truth_ids=[t.pk for t, _ in retiring], reason=RetiredReason.NOISE,
            note=note, run=run, actor=ACTOR.format(stage="noise"),
        )
        if shared is not None:
            shared.forget(applied)
    findings = []
    for t, m in found:
        finding = {"truth_id": t.pk, "content": t.content, "category": m.category, "tier": m.tier,
                   "matched": m.matched, "retires": t.pk in retiring_ids, "retired": t.pk in applied}
        if confirmation is not None:
            verdict, why = confirmation.decisions.get(t.pk, (noise.MODEL_ERROR, "not asked"))
            finding.update(model=verdict, model_reason=why)
            if why == noise.MODEL_DEFERRED:
                finding["deferred"] = True  # the run's budget: asked in a later pass
        findings.append(finding)
    # What the stage retires first, then the sure tier's (a model kept them), then suspects.
    findings.sort(key=lambda f: (not f["retires"], f["tier"] != noise.TIER_SURE))
    return _record(run, user_id, "noise", mode, examined=len(rows), affected=len(retiring), applied=len(applied),
                   seconds=time.monotonic() - started, findings=findings, shared=shared)


def run_decay(run: ConsolidationRun, user_id: int, *, shared: UserPass | None = None) -> StageResult | None:
    """The decay stage for one user (see ``decay.py``); writes in apply mode only."""
    mode, existing = _start(run, user_id, "decay", shared)
    if mode == StageMode.OFF or existing is not None:
        return existing
    started = time.monotonic()
    if shared is not None and mode != StageMode.APPLY:
        # Report mode reads the pass's rows (no lock needed: nothing is written).
        rows = [(r[0], r[2], r[1], r[4], r[5], r[6], r[7]) for r in shared.consolidatable()]
        result = decay.decay_rows(rows, now=pass_time(run))
    else:
        result = decay.decay_user(user_id=user_id, now=pass_time(run), write=mode == StageMode.APPLY)
    return _record(run, user_id, "decay", mode, examined=result.examined, affected=result.changed,
                   applied=result.changed if mode == StageMode.APPLY else 0,
                   seconds=time.monotonic() - started, findings=result.findings, shared=shared)


#: Sentinel: resolve the model client from the run (``model_client``).
FROM_RUN: Any = object()


def model_client(run: ConsolidationRun, stage: str) -> Any | None:
    """The client of ``stage``'s model calls: the LLM judge (an object with ``ask_json``)
    when the run's judge is one, else None (offline: the rules), None too while the stage's
    calls are withheld (``withheld``). While a pass is forecast: the forecast's recorder
    (``forecast.StageRecorder``), whatever the run's judge."""
    recorder = forecast.recorder()
    if recorder is not None:
        return recorder
    if not run.judge_model or is_withheld(stage):
        return None
    try:
        client = get_judge_client("llm")
    except JudgeMisconfigured:
        logger.warning("run %s: the LLM client is not configured; part-2 stages run offline", run.pk)
        return None
    return client if hasattr(client, "ask_json") else None


def run_mine(
    run: ConsolidationRun, user_id: int, *, embedder: Embedder, client: Any = FROM_RUN, shared: UserPass | None = None
) -> StageResult | None:
    """The mine stage for one user (see ``mining.py``); adds truths in apply mode only.

    The model calls (if any) run outside any transaction; the new truths and the
    stage's result are written in one transaction, so a second delivery of the same
    work finds the result and adds nothing twice.
    """
    mode, existing = _start(run, user_id, "mine", shared)
    if mode == StageMode.OFF or existing is not None:
        return existing
    started = time.monotonic()
    client = model_client(run, "mine") if client is FROM_RUN else client
    result = mining.find(run=run, user_id=user_id, embedder=embedder, client=client,
                         has_messages=shared is None or shared.facts.messages)
    write = mode == StageMode.APPLY and bool(result.added)
    with transaction.atomic() if write else contextlib.nullcontext():
        if write:
            mining.write(run=run, user_id=user_id, result=result, embedder=embedder)
            if shared is not None:
                shared.mined += len(result.added)
        examined = len(result.added) + len(result.skipped)
        # New truths and their result commit together; a pass that added none may wait.
        return _record(run, user_id, "mine", mode, examined=examined, affected=len(result.added),
                       applied=len(result.added) if write else 0, seconds=time.monotonic() - started,
                       findings=result.findings(written=write), immediate=write, shared=shared)


def run_relocate(
    run: ConsolidationRun, user_id: int, *, client: Any = FROM_RUN, shared: UserPass | None = None
) -> StageResult | None:
    """The relocate stage for one user (see ``relocation.py``); relocates in apply mode
    only, each truth in its own transaction (a conflict skips that truth, recorded)."""
    mode, existing = _start(run, user_id, "relocate", shared)
    if mode == StageMode.OFF or existing is not None:
        return existing
    started = time.monotonic()
    client = model_client(run, "relocate") if client is FROM_RUN else client
    rows = [(r[0], r[2], r[3]) for r in shared.consolidatable()] if shared is not None else None
    decided = relocation.choose_moves(run=run, user_id=user_id, client=client, rows=rows)
    findings: list[dict[str, Any]] = [{"errors": decided.errors, "refused": decided.refused,
                                       "extractor": "llm" if client is not None else "rules",
                                       **decided.asked_head()}]
    applied = 0
    for move in decided.moves:
        item: dict[str, Any] = {"truth_id": move.truth.pk, "content": move.truth.content, "title": move.title,
                                "summary": move.summary, "reason": move.reason, "relocated": False}
        if mode == StageMode.APPLY:
            try:
                note, pointer = relocation.relocate(move=move, run=run)
            except relocation.RelocationConflict as exc:
                item["error"] = str(exc)
            else:
                applied += 1
                item.update(relocated=True, note=note.slug, pointer_id=pointer.pk)
        findings.append(item)
    return _record(run, user_id, "relocate", mode, examined=decided.examined, affected=len(decided.moves),
                   applied=applied, seconds=time.monotonic() - started, findings=findings, shared=shared)


def run_promote(
    run: ConsolidationRun, user_id: int, *, client: Any = FROM_RUN, shared: UserPass | None = None
) -> StageResult | None:
    """The promote stage for one user (see ``promotion.py``); appends rules in apply mode only."""
    mode, existing = _start(run, user_id, "promote", shared)
    if mode == StageMode.OFF or existing is not None:
        return existing
    started = time.monotonic()
    client = model_client(run, "promote") if client is FROM_RUN else client
    result, rules = promotion.propose_rules(run=run, user_id=user_id, client=client)
    added = promotion.append(run=run, user_id=user_id, rules=rules, result=result, write=mode == StageMode.APPLY,
                             model=getattr(client, "model", ""))
    head = {"skipped": result.skipped, "errors": result.errors, "refused": result.refused,
            "extractor": "llm" if client is not None else "rules", **result.asked_head()}
    return _record(run, user_id, "promote", mode, examined=result.offered, affected=added,
                   applied=added if mode == StageMode.APPLY else 0, seconds=time.monotonic() - started,
                   findings=[head, *result.proposals], shared=shared)


def candidate_clusters(
    run: ConsolidationRun, user_id: int, *, seed_filter: Q | None = None, shared: UserPass | None = None
) -> list[clustering.CandidateCluster]:
    """Phase 1's clusters of ``user_id`` from both arms, interleaved (``lexical.interleave``).

    An arm in report mode is counted (its ``StageResult``) but its clusters are not
    returned for judging; an arm that is off is not run.
    """
    modes = run_modes(run)
    semantic: list[clustering.CandidateCluster] = []
    lexical_clusters: list[clustering.CandidateCluster] = []
    if modes["semantic"] != StageMode.OFF:
        started = time.monotonic()
        small = shared is not None and len(shared.rows) <= vectors.FETCH_ROWS
        read = shared.user_vectors() if shared is not None and shared.vectors is not None else None
        if app_settings.NEIGHBOURHOODS:
            # What the words find (the nearest by Jaccard, the attributes' cues) joins the
            # neighbourhoods when the lexical arm is judged: ``--only semantic`` is the embedding alone.
            floor = float(app_settings.NEIGHBOURHOOD_JACCARD_FLOOR)
            words = modes["lexical"] == StageMode.APPLY
            semantic = neighbourhoods.find_groups(
                user_id=user_id, threshold=run.threshold, seed_filter=seed_filter, small=small, vectors=read,
                rows=[(r[0], r[1], r[2]) for r in shared.rows] if shared is not None else None,
                near_words=(lambda users, rows, seeds, members: lexical.neighbours(users, rows, seeds, members,
                                                                                  floor=floor)) if words else None,
                attributes=words,
            )
        else:
            semantic = clustering.find_clusters(
                user_id=user_id, threshold=run.threshold, seed_filter=seed_filter, small=small, vectors=read,
            )
        _record(run, user_id, "semantic", modes["semantic"], examined=0, affected=len(semantic), applied=0,
                seconds=time.monotonic() - started, findings=[], shared=shared)
    if modes["lexical"] != StageMode.OFF:
        started = time.monotonic()
        judged_semantic = semantic if modes["semantic"] == StageMode.APPLY else []
        taken = {pk for c in judged_semantic for pk in c.member_ids}
        if shared is not None and (seed_filter is None or shared.vectors is not None):
            lexical_clusters = lexical.lexical_clusters(
                [(r[0], r[1], r[2]) for r in shared.rows], user_id=user_id,
                seed_ids=shared.seed_ids(),
                threshold=float(app_settings.JACCARD_THRESHOLD), taken=taken,
            )
        else:
            lexical_clusters = lexical.find_lexical_clusters(user_id=user_id, seed_filter=seed_filter, taken=taken)
        _, added = lexical.interleave(judged_semantic, lexical_clusters)
        _record(run, user_id, "lexical", modes["lexical"], examined=len(lexical_clusters), affected=added,
                applied=0, seconds=time.monotonic() - started,
                findings=[{"truth_ids": list(c.member_ids), "jaccard": list(c.similarities)} for c in lexical_clusters],
                shared=shared)
    judged_semantic = semantic if modes["semantic"] == StageMode.APPLY else []
    judged_lexical = lexical_clusters if modes["lexical"] == StageMode.APPLY else []
    clusters, _ = lexical.interleave(judged_semantic, judged_lexical)
    if StageMode.APPLY in (modes["semantic"], modes["lexical"]):
        # A truth mined as a change of a stored one is judged beside it (a supersede).
        clusters = novelty.with_changes(clusters, _start(run, user_id, "mine", shared)[1], user_id=user_id)
    return keep_undone_apart(clusters, user_id=user_id, shared=shared)


def keep_undone_apart(
    clusters: list[clustering.CandidateCluster], *, user_id: int, shared: UserPass | None = None
) -> list[clustering.CandidateCluster]:
    """``clusters`` without the pairs an operator separated by undoing their merge or
    supersede: a member that an undo restored together with an earlier member of the same
    cluster (or with the truth that had replaced it) is left out, and a cluster left with
    fewer than ``MIN_CLUSTER_SIZE`` members is dropped. So the next pass does not make the
    undone step again; the truths may still merge with others. One query (none when the
    user's pass knows no undo separated any of the user's truths: ``PassFacts``)."""
    if shared is not None and shared.user_id == user_id and not shared.facts.undone:
        return clusters
    groups: dict[int, set[int]] = {}
    for source_id, result_id in LineageEvent.objects.filter(
        action=LineageEvent.Action.UNDO, result__user_id=user_id
    ).values_list("source_id", "result_id"):
        groups.setdefault(source_id, {source_id}).add(result_id)
    if not groups:
        return clusters
    apart: dict[int, set[int]] = {}
    for group in groups.values():
        for pk in group:
            apart.setdefault(pk, set()).update(group - {pk})
    kept: list[clustering.CandidateCluster] = []
    for cluster in clusters:
        ids: list[int] = []
        sims: list[float] = []
        for pk, sim in zip(cluster.member_ids, cluster.similarities, strict=True):
            if not any(other in apart.get(pk, ()) for other in ids):
                ids.append(pk)
                sims.append(sim)
        if len(ids) >= app_settings.MIN_CLUSTER_SIZE:
            kept.append(clustering.CandidateCluster(user_id=cluster.user_id, member_ids=tuple(ids),
                                                    similarities=tuple(sims)))
    return kept


def run_prune(run: ConsolidationRun, user_id: int, *, shared: UserPass | None = None) -> StageResult | None:
    """The prune stage for one user, after the run's merges (see ``prune.py``).

    Post-decay relevance is recomputed at the pass time (decay is deterministic, so it
    is the value the decay stage writes in apply mode) whenever decay is configured, even
    when ``--only`` left the decay stage out of this run: ``--only prune`` finds what a
    whole pass's prune finds. Only decay switched off in the settings means no decay.

    The prune cap (``prune.within_cap``, ``run_settings.prune_share``): the lowest-scoring
    candidates up to the run's share of the truths examined (the user's live truths that
    prune may retire) are pruned in apply mode, the rest refused: ``refused`` counts them
    and each finding says ``retired`` and ``refused``.
    """
    mode, existing = _start(run, user_id, "prune", shared)
    if mode == StageMode.OFF or existing is not None:
        return existing
    started = time.monotonic()
    now = pass_time(run)
    relevance = None
    configured = (run.effective_settings or {}).get("configured_stage_modes") or run_modes(run)
    if configured.get("decay", StageMode.OFF) != StageMode.OFF:
        relevance = decay.decay_user(user_id=user_id, now=now, write=False).relevance
    examined, found = prune.find_candidates(user_id=user_id, now=now, relevance=relevance)
    within, refused = prune.within_cap(found, live=examined, share=prune_share(run))
    refused_ids = {c.truth.pk for c in refused}
    applied: list[int] = []
    if mode == StageMode.APPLY and within:
        applied = retire.retire(
            truth_ids=[c.truth.pk for c in within], reason=RetiredReason.PRUNED,
            note={c.truth.pk: c.note() for c in within}, run=run, actor=ACTOR.format(stage="prune"),
        )
    findings = [
        {"truth_id": c.truth.pk, "content": c.truth.content, "relevance": round(c.relevance, 6),
         "quality": round(c.quality, 6), "retired": c.truth.pk in applied, "refused": c.truth.pk in refused_ids}
        for c in found
    ]
    return _record(run, user_id, "prune", mode, examined=examined, affected=len(found), applied=len(applied),
                   refused=len(refused), seconds=time.monotonic() - started, findings=findings, shared=shared)


# --- the registry: every stage, when it runs, what it reports ----------------------


def _noise_retires(finding: dict[str, Any]) -> bool:
    """Whether the noise stage retires (or would) this finding; rows written before the
    tiers carry no ``retires``: the model's verdict, or the rule judge's match, decided."""
    if "retires" in finding:
        return bool(finding["retires"])
    return finding.get("model", noise.MODEL_NOISE) == noise.MODEL_NOISE


def _noise_report(results: Sequence[StageResult], *, examples: int) -> dict[str, Any]:
    """The noise stage's extra report: what the model kept or left undecided, the
    findings per tier (``by_tier``: {"sure": n, "suspect": m}), and the suspects the rule
    judge left for a model (``suspects``: their count; ``suspect_examples``: the first)."""
    found = [f for r in results for f in r.findings]
    said = [f.get("model") for f in found]
    left = [f for f in found if f.get("tier") == noise.TIER_SUSPECT and "model" not in f and not _noise_retires(f)]
    by_tier = {tier: sum(1 for f in found if f.get("tier", noise.TIER_SURE) == tier) for tier in noise_rules.TIERS}
    deferred = sum(1 for f in found if f.get("deferred"))
    return {"model_kept": said.count(noise.MODEL_KEEP), "model_errors": said.count(noise.MODEL_ERROR) - deferred,
            "deferred": deferred,
            "by_tier": by_tier, "suspects": len(left), "suspect_examples": left[:examples]}


def _part2_report(stage: str, results: Sequence[StageResult], *, examples: int) -> dict[str, Any]:
    """The extra report of mine (window, sessions, added / skipped with reasons),
    relocate and promote (errors, refused model entries, examples; what the model was asked:
    ``asked`` truths in ``calls`` calls for ``users_asked`` of ``users`` users,
    ``remembered`` answered from memory, ``extractor`` llm or rules); none without results."""
    if not results:
        return {}
    extra: dict[str, Any] = {"examples": [], "errors": []}
    skipped: list[dict[str, Any]] = []
    sessions = messages = 0
    for result in results:
        head, items = (result.findings[0], result.findings[1:]) if result.findings else ({}, [])
        extra["errors"].extend(head.get("errors") or [])
        # Work the run's budget left for a later pass (sessions for mine, truths otherwise).
        extra["deferred"] = extra.get("deferred", 0) + int(head.get("deferred") or 0)
        if stage == "mine":
            extra.setdefault("window", head.get("window"))
            extra["extractor"] = head.get("extractor")
            sessions += len(head.get("sessions") or [])
            messages += int(head.get("messages") or 0)
            skipped.extend(i for i in items if i.get("outcome") == "skipped")
            items = [i for i in items if i.get("outcome") != "skipped"]
        if stage == "promote" and head.get("skipped"):
            extra["skipped"] = head["skipped"]
        if stage in ("relocate", "promote"):
            # What the model was asked (rows written before these counts carry none: 0).
            for key in ("asked", "calls", "remembered"):
                extra[key] = extra.get(key, 0) + int(head.get(key) or 0)
            extra["users_asked"] = extra.get("users_asked", 0) + (1 if head.get("calls") else 0)
            extra["users"] = extra.get("users", 0) + 1
            if head.get("extractor"):
                same = extra.get("extractor") in (None, head["extractor"])
                extra["extractor"] = head["extractor"] if same else "mixed"
        extra["examples"].extend(items[: max(0, examples - len(extra["examples"]))])
    if stage == "mine":
        extra.update(sessions=sessions, messages=messages, skipped_examples=skipped[:examples])
        reasons: dict[str, int] = {}
        for result in results:
            for i in result.findings[1:]:
                if i.get("outcome") == "skipped":
                    why = str(i.get("why") or "").split(" (")[0].split(" #")[0]
                    reasons[why] = reasons.get(why, 0) + 1
        extra["skipped_by_reason"] = reasons
    return extra


class When(enum.Enum):
    """When a stage runs in a pass, per user: ``FIRST`` (before anything else, outside
    any transaction), ``BEFORE_CLUSTERING``, ``CLUSTERING`` (the candidate arms, run
    together by ``candidate_clusters``), ``AFTER_CLUSTERING`` (outside the pass's
    transaction when it may call a model) and ``AFTER_MERGES`` (in ``close_run``)."""

    FIRST = "first"
    BEFORE_CLUSTERING = "before_clustering"
    CLUSTERING = "clustering"
    AFTER_CLUSTERING = "after_clustering"
    AFTER_MERGES = "after_merges"


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One stage of the pass.

    ``step(run, user_id, **context)`` runs it for one user (None: ``candidate_clusters``
    runs it); ``needs`` names what it takes from the pass's ``context`` (e.g. the
    embedder). ``calls_model``: it may call the run's LLM judge's model. ``examples``:
    the report lists its first findings, those for which ``shows`` is true if given;
    ``report(results, examples=n)`` adds the stage's own entries to its report.
    """

    name: str
    when: When
    step: Callable[..., StageResult | None] | None = None
    needs: tuple[str, ...] = ()
    calls_model: bool = False
    examples: bool = False
    shows: Callable[[dict[str, Any]], bool] | None = None
    report: Callable[..., dict[str, Any]] | None = None

    def run(
        self, run: ConsolidationRun, user_id: int, *, shared: UserPass | None = None, **context: Any
    ) -> StageResult | None:
        """Run the stage for ``user_id`` (in its mode for ``run``; once per run and user),
        in the ``shared`` pass if given (``user_pass``)."""
        if self.step is None:
            return None
        return self.step(run, user_id, shared=shared, **{key: context[key] for key in self.needs})


#: Every stage in the order of a pass (``run_settings.STAGES`` names them in this order).
REGISTRY: tuple[Stage, ...] = (
    Stage(name="mine", when=When.FIRST, step=run_mine, needs=("embedder",), calls_model=True,
          report=functools.partial(_part2_report, "mine")),
    # Noise's model confirmation runs where noise does, before clustering.
    Stage(name="noise", when=When.BEFORE_CLUSTERING, step=run_noise, calls_model=True, examples=True,
          # Only what the stage retires (or would): not a candidate the model kept, nor a
          # suspect the rule judge left alone.
          shows=_noise_retires, report=_noise_report),
    Stage(name="decay", when=When.BEFORE_CLUSTERING, step=run_decay, examples=True),
    Stage(name="lexical", when=When.CLUSTERING),
    Stage(name="semantic", when=When.CLUSTERING),
    Stage(name="relocate", when=When.AFTER_CLUSTERING, step=run_relocate, calls_model=True,
          report=functools.partial(_part2_report, "relocate")),
    Stage(name="promote", when=When.AFTER_CLUSTERING, step=run_promote, calls_model=True,
          report=functools.partial(_part2_report, "promote")),
    Stage(name="prune", when=When.AFTER_MERGES, step=run_prune, examples=True),
)


def run_at(
    when: When, run: ConsolidationRun, user_id: int, *, shared: UserPass | None = None, **context: Any
) -> None:
    """Run the stages of ``when`` for ``user_id``, in registry order, in the ``shared`` pass
    if given (``user_pass``); ``context`` holds what some need (``Stage.needs``: ``embedder``
    for mine)."""
    for stage in REGISTRY:
        if stage.when is when:
            stage.run(run, user_id, shared=shared, **context)


def calls_model_after_clustering(run: ConsolidationRun) -> bool:
    """Whether a stage after clustering may call a model for ``run`` (an LLM judge's
    run, such a stage on): they must then run outside any transaction."""
    modes = run_modes(run)
    on = any(s.calls_model and modes[s.name] != StageMode.OFF for s in REGISTRY if s.when is When.AFTER_CLUSTERING)
    return on and run.judge_kind == ConsolidationRun.JudgeKind.LLM
