"""Keyword search on PostgreSQL: FTS5's bm25 computed in SQL from the same statistics (term
frequencies from `ts_rank_cd` with one position per hit, weights breadcrumb 2, text 1; lower is
better, as in SQLite), by `KeywordSearch`: impact-tier passes that settle an unscoped top
without scoring every match, document frequencies sampled or counted and kept per version of
the lexical rows, scoped searches led by whichever side is smaller."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from indexer.keywords import KeywordQuery
from indexer.store.postgres.connection import learned, learned_everywhere
from indexer.store.postgres.tsquery import (
    MATCH_PARAM,
    folded_phrases,
    impact_tsquery,
    phrase_tsquery,
    prefix_ranges,
    single_lexeme,
    sole_lexeme_forms,
    with_lexemes,
)
from indexer.store.postgres.tsvector import (
    BM25_B,
    BM25_K1,
    IMPACT_LABELS,
    IMPACT_REFERENCE_LENGTH,
    IMPACT_TIERS,
    folder_scope,
    scope_condition,
)
from indexer.store.rows import (
    RankedChunk,
    SearchScope,
)

# ts_rank_cd weights {D, C, B, A}: a cover of one lexeme scores its weight, so rank / 0.5 counts
# the hits of a phrase, a breadcrumb hit (weight A) twice, as bm25(chunks_fts, 2.0, 1.0) does
RANK_WEIGHTS = "{0.5, 0.5, 0.5, 1.0}"

# which state of the lexical rows the statistics describe: the statement triggers rewrite a
# source's fts_stats row in every transaction that writes its lexical rows, so the row versions'
# xmin (the writing transaction) change with any write, even one that leaves the totals equal
LEXICAL_VERSION_SQL = (
    "COALESCE(string_agg(fts_stats.source_id || ':' || fts_stats.xmin::text, ',' ORDER BY fts_stats.source_id), '')"
)
PHRASE_HITS_KEPT = 10_000  # document frequencies kept per index: a long-lived server meets unbounded queries
IMPACT_STEPS = 4  # tier passes (each IMPACT_STEP tiers deeper while too few chunks are found) before the full scan
IMPACT_STEP = 3
EVERY_PHRASE_MAX = 4  # queries of 2..4 phrases also take chunks holding all of them (see _tiered_search),
EVERY_MAX_ROWS = 3_000  # all such chunks when the sample says they are at most this many

# Below TIERED_MIN_ROWS lexical rows every match is scored (cheap) with exact document
# frequencies; above, a phrase's frequency is estimated from a sample of about SAMPLED_ROWS rows
# (counted exactly when the sample holds fewer than SAMPLE_MIN_HITS of its chunks: rare phrases,
# whose idf weighs most, are cheap to count), and a query whose phrases match fewer than
# FULL_SCAN_MAX_MATCHES chunks is scored whole.
TIERED_MIN_ROWS = 20_000
SAMPLED_ROWS = 2_000
SAMPLE_MIN_HITS = 20
FULL_SCAN_MAX_MATCHES = 2_000

# A one-word phrase (or prefix) whose lexemes the planner lists among the column's most common
# elements takes its document frequency from there: ANALYZE's sample is 15x the keyword search's
# and costs the query nothing (a prefix's chunks: those holding any of its listed lexemes, taken
# as independent). While the rows written since that ANALYZE exceed STATS_DRIFT_SHARE of the
# estimate, the sample answers instead. Off: every phrase to the sample and the counts.
LEXEME_STATISTICS = True
STATS_DRIFT_SHARE = 0.25

# how many chunks hold every phrase only chooses a pass (EVERY_MAX_ROWS), never a score: a
# quarter of the sample (a subset of its pages) answers it, at a sixth of the cost
CONJUNCTION_SAMPLED_ROWS = 500

# A settling pass (see _settling_pass) looks up at most SETTLING_MAX_SETS phrase sets (each a
# GIN scan: many sets of common prefixes cost what scoring every match does), and only when the
# planner expects it to read under SETTLING_MAX_SHARE of every match (reading more scores slower
# than the scan).
SETTLING_MAX_SETS = 16
SETTLING_MAX_SHARE = 0.4

# A settling pass's candidate set is counted only while the planner expects at most the larger
# of COUNTED_MAX_ESTIMATE rows and COUNTED_MAX_SHARE of the index's (it expects far too many of
# an impact tsquery's prefix words, so most such counts are small); past it, the estimate stands:
# counting a deep tier of common prefixes builds the whole bitmap of their impact words.
COUNTED_MAX_ESTIMATE = 10_000
COUNTED_MAX_SHARE = 0.1

# A scoped keyword search reads either the scope's rows, testing the match on each (ids sorted:
# neighbours share one descent of the key), or the matches through the document index, the scope
# testing each (scattered heap pages: a few times dearer a row). The matches lead when the
# phrases' summed document frequencies are under SCOPE_MATCH_SHARE of the scope's rows and every
# phrase is one word (a phrase of several words reads and rechecks every chunk holding all of
# them). A scope of more than SCOPE_IDS_MAX chunks is left to the planner's join (an array of its
# ids would hide its size and cost memory).
SCOPE_MATCH_SHARE = 0.5
SCOPE_IDS_MAX = 100_000

# A folder's matches come from one scan of the document index, which reads every posting of its
# phrases over the whole index before the folder narrows them; the folder's own rows, each
# testing the match, cost about FOLDER_ROW_POSTINGS postings a row. The rows lead when the
# phrases' summed document frequencies exceed FOLDER_ROW_POSTINGS times the folder's rows (the
# planner's estimate of its lexeme), asked only once the postings reach FOLDER_ROW_POSTINGS *
# FOLDER_LEAD_MIN_ROWS; then they also replace a phrase's tier passes, whose lowest tiers read
# nearly every posting of the phrase too.
FOLDER_ROW_POSTINGS = 5
FOLDER_LEAD_MIN_ROWS = 1_000


@dataclass
class KeptCounts:
    """The document frequencies keyword searches of one index counted or estimated, for one
    version of its lexical rows (LEXICAL_VERSION_SQL), and the planner's shares of its most
    common lexemes for one ANALYZE; one per index and process (`connection.learned`)."""

    version: str | None = None
    hits: dict[str, int] = field(default_factory=dict)  # phrase -> chunks holding it
    samples: dict[str, float] = field(default_factory=dict)  # phrase -> estimate from the fixed sample
    analyzed: str | None = None  # which ANALYZE `shares` come from
    shares: dict[str, float] = field(default_factory=dict)  # lexeme -> share of rows holding it


def forget_phrase_counts() -> None:
    """Forget every phrase's kept document frequency, as a new process starts: benchmarks time
    a query as met for the first time (a server mostly meets new phrases)."""
    for kept in learned_everywhere(KEPT_COUNTS):
        kept.hits.clear()  # in place: open stores share these dicts
        kept.samples.clear()


KEPT_COUNTS = "keyword counts"


class KeywordSearch:
    """FTS5's bm25 over the lexical rows of one connection's index: the passes that settle a
    top without scoring every match, the samples and counts of document frequencies they need
    (shared through `KeptCounts`), and a trace of how the last search went."""

    def __init__(self, conn: psycopg.Connection[Any], url: str) -> None:
        self.conn = conn
        self.url = url
        # phrase -> chunks holding it, valid while the lexical rows are as they were when counted
        self._phrase_hits: dict[str, int] = {}
        self._phrase_hits_key: str | None = None
        # phrase -> its share of a fixed sample times the rows, for the same version (rare ones too)
        self._phrase_samples: dict[str, float] = {}
        # a query's prefixes that stand for one lexeme: quoted prefix -> quoted lexeme (see search)
        self._sole_lexemes: dict[str, str] = {}
        self._analyzed_state: tuple[int, str] | None = None  # (rows written since, which ANALYZE)
        # how the last search went, pass by pass (for benchmarks and tests): formatted only when read
        self._notes: list[tuple[str, tuple[object, ...]]] = []

    @property
    def trace(self) -> list[str]:
        """How the last search went, one line per decision or pass."""
        return [template.format(*args) for template, args in self._notes]

    def _note(self, template: str, *args: object) -> None:
        self._notes.append((template, args))

    def search(self, match: KeywordQuery, limit: int, scope: SearchScope) -> list[RankedChunk]:
        """Chunks matching `match`, best bm25 (lowest) first: FTS5's bm25
        over the whole index's statistics (breadcrumb weight 2, text 1), ties by id.

        Unscoped on a large index (TIERED_MIN_ROWS), the chunks of the top impact tiers are
        scored first, and the rest only when the bound says they could reach the top (see
        IMPACT_TIERS). Otherwise one pass: every match's phrase frequencies are taken once
        (ts_rank_cd per phrase) and each phrase's document frequency is counted from those same
        rows. Scoped, the document frequencies still come from the whole index: counted (or on
        a large index estimated) once per phrase and kept until the lexical rows change, so a
        repeated phrase costs only the scoring of the scope's own matches; a folder or file scope
        finds those in the same index scan as the match (`folder_scope`), any other scope by its
        chunk ids."""
        self._notes = []
        self._sole_lexemes = {}
        self._analyzed_state = None
        phrases = folded_phrases(match)
        if not phrases or limit <= 0:
            return []
        queries = [phrase_tsquery(tokens, prefix) for tokens, prefix in phrases]
        prefixes = prefix_ranges(phrases)
        # with the totals, the prefixes' sole lexemes and the state of the planner's statistics
        # (`_lexeme_shares`): one round trip before any row is read
        version, total_rows, total_tokens, sole, analysis = self.conn.execute(
            f"""SELECT {LEXICAL_VERSION_SQL}, COALESCE(sum(rows), 0), COALESCE(sum(tokens), 0),
                       ARRAY(SELECT (SELECT CASE WHEN count(*) = 1 THEN min(w.lexeme) END
                                     FROM (SELECT lexeme FROM lexemes WHERE lexeme >= p.low AND lexeme < p.high
                                           ORDER BY lexeme LIMIT 2) w)
                             FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS p(low, high, n) ORDER BY p.n),
                       (SELECT ARRAY[n_mod_since_analyze::text,
                                     concat_ws(':', analyze_count + autoanalyze_count, last_analyze, last_autoanalyze)]
                        FROM pg_stat_user_tables WHERE relid = 'chunks_fts'::regclass)
                FROM fts_stats""",
            ([low for low, _ in prefixes], [high for _, high in prefixes]),
        ).fetchone() or ("", 0, 0, [], None)
        self._analyzed_state = None if analysis is None else (int(analysis[0] or 0), str(analysis[1]))
        total_rows, total_tokens = int(total_rows), int(total_tokens)
        exact = {low: str(lexeme) for (low, _), lexeme in zip(prefixes, sole, strict=True) if lexeme is not None}
        self._sole_lexemes = sole_lexeme_forms(exact)
        if exact:
            self._note("prefixes as their one lexeme: {}", ", ".join(f"{p}* = {w}" for p, w in exact.items()))
        if not total_rows:
            return []
        self._remember_phrase_hits(str(version), {})
        avgdl = total_tokens / total_rows or 1.0
        large = total_rows >= TIERED_MIN_ROWS
        if scope.is_all:
            if large:
                # the sample first: a query of rare phrases is scored whole, and that scan counts them
                every = " & ".join(f"({q})" for q in queries) if 2 <= len(queries) <= EVERY_PHRASE_MAX else None
                self._sample_phrases([*queries, *([every] if every else [])], total_rows)
                common = sum(self._phrase_hits.get(phrase, 0) for phrase in queries)
                if common > FULL_SCAN_MAX_MATCHES:
                    found = self._document_frequencies(queries, total_rows)
                    few = every is not None and self._phrase_samples.get(every, math.inf) <= EVERY_MAX_ROWS
                    hits = self._tiered_search(phrases, queries, found, total_rows, avgdl, limit, every, few)
                    if hits is not None:
                        return hits
            return self._full_search(queries, limit)
        found = self._document_frequencies(queries, total_rows)
        if not any(found):
            return []
        idf = _idfs(found, total_rows)
        folder = folder_scope(scope)
        if folder is not None:
            self._note("scope: the folder's lexeme in the document index")
            postings = sum(found)
            may_lead = postings >= FOLDER_ROW_POSTINGS * FOLDER_LEAD_MIN_ROWS
            folder_rows = self._estimated_rows(*folder) if may_lead or (large and len(queries) == 1) else 0.0
            rows_lead = may_lead and postings > FOLDER_ROW_POSTINGS * folder_rows
            if rows_lead:
                # cheaper than the postings, and than a phrase's tier passes, which read most of them
                self._note("scope: the folder's ~{:.0f} rows test the match", folder_rows)
            elif large and len(queries) == 1 and min(1.0, folder_rows / total_rows) * found[0] > FULL_SCAN_MAX_MATCHES:
                # one phrase with many matches in the folder: its top impact tiers first, as the
                # whole index's (a query of several phrases scores the folder's matches faster
                # than the passes settle it)
                share = min(1.0, folder_rows / total_rows)
                hits = self._tiered_search(
                    phrases, queries, found, total_rows, avgdl, limit, None, False, folder, share
                )
                if hits is not None:
                    return hits
                self._note("scope: every match in the folder scored")
            return self._scored(queries, idf, avgdl, limit, *folder, where_leads=rows_lead)
        where, scope_params = scope_condition(scope, "c")
        scoped = f"SELECT c.id FROM chunks c WHERE {where}"
        scope_rows = self._scope_rows(scoped, scope_params)
        if not scope_rows:
            return []
        if all(single_lexeme(q) for q in queries) and sum(found) < SCOPE_MATCH_SHARE * scope_rows:
            self._note("scope: {} rows, the matches first (~{})", scope_rows, sum(found))
            return self._scored(queries, idf, avgdl, limit, f"f.id IN ({scoped})", scope_params, matches_lead=True)
        if scope_rows <= SCOPE_IDS_MAX:
            self._note("scope: {} rows, each tested", scope_rows)
            sorted_ids = f"f.id = ANY(ARRAY({scoped} ORDER BY c.id))"
            return self._scored(queries, idf, avgdl, limit, sorted_ids, scope_params, where_leads=True)
        self._note("scope: over {} rows, the planner's join", SCOPE_IDS_MAX)
        return self._scored(queries, idf, avgdl, limit, f"f.id IN ({scoped})", scope_params)

    def _scope_rows(self, scoped: str, params: dict[str, object]) -> int:
        """How many chunks the scope's id query `scoped` yields, counted up to SCOPE_IDS_MAX + 1
        (a path scope's ids come from the covering path index: ~0.1 us a chunk). The
        planner's own estimate of a folder's range is far off (71 expected where 2,001 were)."""
        row = self.conn.execute(
            f"SELECT count(*) FROM ({scoped} LIMIT {SCOPE_IDS_MAX + 1}) s", params, prepare=False
        ).fetchone()
        return int(row[0]) if row else 0

    def _full_search(self, queries: Sequence[str], limit: int) -> list[RankedChunk]:
        """Every match of the whole index scored, in one scan; its exact document frequencies
        are kept for later queries."""
        params: dict[str, object] = {f"q{i}": phrase for i, phrase in enumerate(queries)}
        params["all"] = " | ".join(f"({phrase})" for phrase in queries)
        params["limit"] = limit
        numbers = range(len(queries))
        # one scan ranks every match once per phrase (parallel workers may share the scan;
        # OFFSET 0 keeps the ranking below the window, so it runs once per row); each
        # phrase's document frequency is then counted over those rows by a window aggregate
        hits = ", ".join(f"count(*) FILTER (WHERE t{i} > 0) OVER () AS n{i}" for i in numbers)
        idf = (f"greatest(1e-6, ln((s.total_rows - m.n{i} + 0.5) / (m.n{i} + 0.5)))" for i in numbers)
        norm = f"{BM25_K1} * (1 - {BM25_B} + {BM25_B} * m.length / s.avgdl)"
        terms = " + ".join(f"{w} * (m.t{i} * {BM25_K1 + 1}) / (m.t{i} + {norm})" for i, w in enumerate(idf))
        sql = f"""WITH s AS (SELECT sum(rows)::float8 AS total_rows, COALESCE(NULLIF(sum(tokens)::float8 / sum(rows), 0), 1) AS avgdl,
                                    {LEXICAL_VERSION_SQL} AS version
                             FROM fts_stats HAVING sum(rows) > 0)
                  SELECT m.id, -({terms}) AS score, s.version, {", ".join(f"m.n{i}" for i in numbers)} FROM s, (
                      SELECT r.*, {hits} FROM (
                          SELECT f.id, f.length::float8 AS length, {_frequencies_sql(len(queries))}
                          FROM chunks_fts f WHERE f.document @@ %(all)s::tsquery OFFSET 0) r) m
                  ORDER BY score, m.id LIMIT %(limit)s"""
        rows = self.conn.execute(sql, self._exact(params), prepare=False).fetchall()
        if rows:
            self._remember_phrase_hits(str(rows[0][2]), dict(zip(queries, map(int, rows[0][3:]), strict=True)))
        return [RankedChunk(int(r[0]), float(r[1])) for r in rows]

    def _tiered_search(
        self,
        phrases: Sequence[tuple[list[str], bool]],
        queries: Sequence[str],
        found: Sequence[int],
        total_rows: int,
        avgdl: float,
        limit: int,
        every: str | None,
        every_few: bool,
        within: tuple[str, dict[str, object]] | None = None,
        share: float = 1.0,
    ) -> list[RankedChunk] | None:
        """The top `limit` from the chunks of the top impact tiers, or None when the bound
        cannot be met in bounded passes (the caller scores every match). `within`: a condition
        every pass also meets (a folder scope, about `share` of the index's rows): the bound
        holds for any set of chunks, so the top of the chunks meeting it is settled alike.

        A pass at tier t takes the chunks where some phrase reaches tier t; with `every` (the
        tsquery of all phrases at once) also the chunks holding every phrase where some phrase
        reaches a lower tier t2 (all of those when `every_few`): a short query's best chunks
        hold all its words. A chunk outside then either lacks a phrase (its others below t) or
        has all of them below t2. When the limit-th score of a pass falls short of its bound it
        is still a floor the true limit-th score reaches, and one last pass settles the top:
        the chunks of some tier plus those holding a set of phrases that could reach the floor
        below that tier (`_settling_pass`), whichever of those the planner expects smallest."""
        idf = _idfs(found, total_rows)
        widen = max(1.0, avgdl / IMPACT_REFERENCE_LENGTH)
        last = len(IMPACT_TIERS) - 1

        def parts(tier: int) -> list[float]:
            return [
                weight * min(BM25_K1 + 1, widen * IMPACT_TIERS[tier]) if n_hit else 0.0
                for weight, n_hit in zip(idf, found, strict=True)
            ]

        def plan(tier: int) -> tuple[int | None, float]:
            """The lower tier for the chunks holding every phrase (None: all of them) and the
            best score a chunk outside the pass's candidates can have."""
            if every is None:
                return None, sum(parts(tier))
            lacking = sum(parts(tier)) - min(parts(tier))
            for lower in range(tier, last + 1):
                if sum(parts(lower)) <= lacking:
                    return lower, lacking
            if every_few:
                return None, lacking
            return last, max(lacking, sum(parts(last)))

        def pass_condition(tier: int) -> tuple[str, dict[str, object]] | None:
            lower, _ = plan(tier)
            candidates = impact_tsquery(phrases, tier + 1)
            if candidates is None:
                return None
            params: dict[str, object] = {"candidates": candidates}
            where = "f.impacts @@ %(candidates)s::tsquery"
            if every is not None:
                params["every"] = every
                if lower is None:
                    where = f"({where} OR f.document @@ %(every)s::tsquery)"
                else:
                    params["every_tiers"] = impact_tsquery(phrases, lower + 1)
                    where = f"({where} OR (f.document @@ %(every)s::tsquery AND f.impacts @@ %(every_tiers)s::tsquery))"
            return _within(where, params, within)

        tier = 0
        for _ in range(IMPACT_STEPS):
            condition = pass_condition(tier)
            if condition is None:
                return None
            bound = plan(tier)[1]
            hits = self._scored(queries, idf, avgdl, limit, *condition, True)
            if len(hits) >= limit:
                kth = -hits[limit - 1].score
                self._note("tier {}: kth {:.3f} bound {:.3f}", IMPACT_LABELS[tier], kth, bound)
                if kth >= bound:
                    return hits
                # a deeper tier whose bound the limit-th score already meets is sure to settle it too
                deeper = next((t for t in range(tier + 1, last + 1) if plan(t)[1] <= kth), None)
                settles = None if deeper is None else pass_condition(deeper)
                return self._settling_pass(
                    phrases,
                    queries,
                    idf,
                    avgdl,
                    limit,
                    kth,
                    parts,
                    settles,
                    [n * share for n in found],
                    within,
                    max(COUNTED_MAX_ESTIMATE, COUNTED_MAX_SHARE * total_rows),
                )
            self._note("tier {}: {} hits", IMPACT_LABELS[tier], len(hits))
            if tier == last:
                return None
            tier = min(last, tier + IMPACT_STEP)
        return None

    def _settling_pass(
        self,
        phrases: Sequence[tuple[list[str], bool]],
        queries: Sequence[str],
        idf: Sequence[float],
        avgdl: float,
        limit: int,
        floor: float,
        parts: Callable[[int], list[float]],
        deeper_pass: tuple[str, dict[str, object]] | None,
        found: Sequence[float],
        within: tuple[str, dict[str, object]] | None,
        count_up_to: float,
    ) -> list[RankedChunk] | None:
        """The exact top `limit` when `floor` is a score the limit-th best chunk is known to
        reach (None: no candidate set looks cheaper than the scan of every match). Outside
        tier t's chunks a chunk has every phrase below t, so it scores less than the sum of
        `parts(t)` over the phrases it holds: tier t's chunks plus those holding some set of
        phrases whose parts reach the floor (MaxScore over phrase sets, each set through the
        document index) hold the whole top. Each tier gives one such candidate set; the one
        the planner expects to be smallest is scored, or `deeper_pass` (a tier pass whose bound
        the floor meets) when it expects that one smaller. A candidate set is sized by counting
        its tier's chunks while the planner expects at most `count_up_to` (it expects 20-350x
        too many of an impact tsquery's prefix words: at 100k chunks 5,721 where 70 were, which
        sent cheap settling passes to the scan) plus each phrase set's matches: a phrase's
        document frequency `found` (in the scope's share), the planner's estimate for sets of
        several. The scan it is weighed against reads
        at least the largest phrase's document frequency: the planner's own estimate of a
        prefix or phrase tsquery's matches falls far short of it (at 200k chunks ~5.6k expected
        where 48.7k matched).
        When the scan still looks cheaper, `deeper_pass` answers if there is one: its rows are
        a subset of the matches (one-phrase queries at 200k: 50-130 ms by the scan, 9-30 ms)."""
        choices: list[tuple[float, str, dict[str, object], str]] = []
        # no count needs to go past what the scan of every match costs, nor past the best so far
        cap = math.ceil(SETTLING_MAX_SHARE * max(found)) + 1
        if deeper_pass is not None:
            choices.append((self._counted_rows(*deeper_pass, cap, count_up_to), *deeper_pass, "pass"))
        shallower_sets: list[tuple[int, ...]] | None = None
        for tier in range(len(IMPACT_TIERS)):
            candidates = impact_tsquery(phrases, tier + 1)
            if candidates is None:
                return None
            params: dict[str, object] = {"candidates": candidates}
            where = "f.impacts @@ %(candidates)s::tsquery"
            sets = _phrase_sets_reaching(parts(tier), floor)
            if sets is None:
                continue  # too many sets at this tier: the index evaluates a long tsquery slowly
            if all((i,) in sets for i, part in enumerate(parts(tier)) if part > 0):
                continue  # every phrase alone reaches the floor: every match, the scan's rows and more
            if sets == shallower_sets:
                continue  # the same sets beside a deeper tier's chunks, which include the shallower's
            shallower_sets = sets
            cheapest = min((choice[0] for choice in choices), default=cap)
            rows: float = self._counted_rows(
                *_within(where, params, within), math.ceil(min(cheapest, cap)) + 1, count_up_to
            )
            if choices and rows >= min(choice[0] for choice in choices):
                break  # a deeper tier's own chunks include these: no deeper candidate set is smaller
            if sets:  # one index condition each: GIN evaluates short tsqueries faster than one long one
                for n, chosen in enumerate(sets):
                    params[f"holding{n}"] = " & ".join(f"({queries[i]})" for i in chosen)
                arms = [f"f.document @@ %(holding{n})s::tsquery" for n in range(len(sets))]
                rows += sum(found[chosen[0]] for chosen in sets if len(chosen) == 1)
                several = [arm for arm, chosen in zip(arms, sets, strict=True) if len(chosen) > 1]
                if several:
                    rows += self._estimated_rows(*_within(" OR ".join(several), params, within))
                where = f"({where} OR {' OR '.join(arms)})"
            where, params = _within(where, params, within)
            choices.append((rows, where, params, f"tier {IMPACT_LABELS[tier]}"))
            if not sets or choices[-1][0] > 2 * min(choice[0] for choice in choices):
                break  # a deeper tier takes more chunks of its own and drops fewer sets
        best = min(choices, key=lambda choice: choice[0], default=None)
        if best is None:
            self._note("settle: over {} phrase sets at every tier", SETTLING_MAX_SETS)
            return None
        estimate, where, params, label = best
        matches = float(max(found))
        if estimate > SETTLING_MAX_SHARE * matches:  # the planner may know the phrases' union larger
            every: dict[str, object] = {"all": " | ".join(f"({q})" for q in queries)}
            matches = max(matches, self._estimated_rows(*_within("f.document @@ %(all)s::tsquery", every, within)))
        if estimate > SETTLING_MAX_SHARE * matches:
            if deeper_pass is None:
                self._note("settle: ~{:.0f} of ~{:.0f} matches, the scan of every match", estimate, matches)
                return None
            # a tier pass reads a subset of the matches, whatever the planner expects of it
            estimate, where, params, label = choices[0]
        self._note("settle at {}: ~{:.0f} of ~{:.0f} matches", label, estimate, matches)
        return self._scored(queries, idf, avgdl, limit, where, params, True)

    def _counted_rows(self, where: str, params: dict[str, object], cap: int, up_to: float) -> float:
        """How many lexical rows meet `where`, counted: for an impact tsquery, whose chunks are
        few and which the planner's statistics misjudge (see `_settling_pass`), the bitmap of
        its index and a heap page per row (~4 us a row), up to `cap`: a deep tier of common
        prefixes holds tens of thousands (the dense 100k: counting them all took 0.5-1.5 s a
        query, more than the scan they were weighed against)."""
        estimate = self._estimated_rows(where, params)
        if estimate > up_to:
            return estimate
        row = self.conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM chunks_fts f WHERE {where} LIMIT {int(cap)}) s",
            self._exact(params),
            prepare=False,
        ).fetchone()
        return int(row[0]) if row else 0

    def _exact(self, params: dict[str, object]) -> dict[str, object]:
        """`params` as a statement that reads rows runs them: each tsquery with the query's
        prefixes that stand for one lexeme as that lexeme (the same rows, found faster). The
        planner's estimates keep the prefixes: the passes are chosen by what it expects of them."""
        forms = self._sole_lexemes
        if not forms:
            return params
        return {
            key: with_lexemes(value, forms) if isinstance(value, str) and MATCH_PARAM.fullmatch(key) else value
            for key, value in params.items()
        }

    def _estimated_rows(self, where: str, params: dict[str, object]) -> float:
        """The planner's estimate of the lexical rows meeting `where` (a fraction of a
        millisecond: no row is read)."""
        row = self.conn.execute(
            f"EXPLAIN (FORMAT JSON) SELECT 1 FROM chunks_fts f WHERE {where}", params, prepare=False
        ).fetchone()
        assert row is not None  # EXPLAIN always answers
        return float(row[0][0]["Plan"]["Plan Rows"])

    def _scored(
        self,
        queries: Sequence[str],
        idf: Sequence[float],
        avgdl: float,
        limit: int,
        where: str,
        where_params: dict[str, object],
        where_leads: bool = False,
        matches_lead: bool = False,
    ) -> list[RankedChunk]:
        """The best `limit` of the matches that also meet `where` (over `chunks_fts f`), scored
        with the given idf and average length. `where` selects through its own index when
        `where_leads`: the match is then tested on its rows alone, not ANDed with every match's
        bitmap (all of a common word's chunks). With `matches_lead` the matches are read first
        (the document index) and `where` only filters them: a planner expecting few rows of
        `where` would otherwise test the match on each of them."""
        params: dict[str, object] = {f"q{i}": phrase for i, phrase in enumerate(queries)}
        params["all"] = " | ".join(f"({phrase})" for phrase in queries)
        params["limit"] = limit
        params["avgdl"] = avgdl
        params.update(where_params)
        terms = []
        for i, weight in enumerate(idf):
            params[f"idf{i}"] = weight
            terms.append(f"%(idf{i})s * (t{i} * {BM25_K1 + 1}) / (t{i} + m.norm)")
        match = "f.document @@ %(all)s::tsquery"
        rows = "chunks_fts f"
        if where_leads:
            match = f"({match}) IS TRUE"  # not an index condition
        elif matches_lead:
            # OFFSET 0: a subquery the scan of `where` cannot drive row by row; the ranking
            # above it runs on the rows meeting `where` alone
            rows = f"(SELECT f.id, f.length, f.document FROM chunks_fts f WHERE {match} OFFSET 0) f"
            match = "TRUE"
        # MATERIALIZED: each ts_rank_cd runs once per row, not once per use in the score
        sql = f"""WITH m AS MATERIALIZED (
                      SELECT f.id, {BM25_K1} * (1 - {BM25_B} + {BM25_B} * f.length::float8 / %(avgdl)s) AS norm,
                             {_frequencies_sql(len(queries))}
                      FROM {rows} WHERE {match} AND {where})
                  SELECT m.id, -({" + ".join(terms)}) AS score FROM m
                  ORDER BY score, m.id LIMIT %(limit)s"""
        return [
            RankedChunk(int(r[0]), float(r[1])) for r in self.conn.execute(sql, self._exact(params), prepare=False)
        ]  # planned for its terms

    def _document_frequencies(self, queries: Sequence[str], total_rows: int) -> list[int]:
        """Each phrase's document frequency over the whole index: remembered, else counted (on
        a large index estimated from a sample, rare phrases counted; a lone phrase's idf
        scales every score alike, so it keeps the sample's estimate)."""
        missing = [phrase for phrase in queries if phrase not in self._phrase_hits]
        if missing:
            if total_rows >= TIERED_MIN_ROWS:
                self._sample_phrases(missing, total_rows)
                if len(queries) == 1:
                    estimate = self._phrase_samples.get(queries[0], 0.0)
                    return [self._phrase_hits.get(queries[0], max(1, round(estimate)))]  # not 0: unknown
            rare = [phrase for phrase in missing if phrase not in self._phrase_hits]
            if rare:
                self._count_phrase_hits(rare)
            if any(phrase not in self._phrase_hits for phrase in queries):  # a write came between
                self._count_phrase_hits(queries)
        return [self._phrase_hits.get(phrase, 0) for phrase in queries]

    def _sample_phrases(self, phrases: Sequence[str], total_rows: int) -> None:
        """Estimate the chunks matching each tsquery: from the planner's statistics where they
        cover it (see LEXEME_STATISTICS), else from a fixed sample of about SAMPLED_ROWS lexical
        rows (REPEATABLE: the same rows while the table is unchanged, so a query keeps its
        scores; CONJUNCTION_SAMPLED_ROWS when only a conjunction is left): kept as a document
        frequency when the sample holds it SAMPLE_MIN_HITS times (a rarer phrase is counted
        where its idf is needed)."""
        wanted = [
            phrase for phrase in phrases if phrase not in self._phrase_samples and phrase not in self._phrase_hits
        ]
        if wanted and LEXEME_STATISTICS:
            wanted = self._frequencies_from_statistics(wanted, total_rows)
        if not wanted:
            return
        params: dict[str, object] = {f"q{i}": phrase for i, phrase in enumerate(wanted)}
        scored = any(not phrase.startswith("(") for phrase in wanted)  # not only a conjunction (see fts_search)
        params["percent"] = min(100.0, 100.0 * (SAMPLED_ROWS if scored else CONJUNCTION_SAMPLED_ROWS) / total_rows)
        counts = ", ".join(f"count(*) FILTER (WHERE document @@ %(q{i})s::tsquery)" for i in range(len(wanted)))
        row = self.conn.execute(
            f"""SELECT (SELECT {LEXICAL_VERSION_SQL} FROM fts_stats), count(*), {counts}
                FROM chunks_fts TABLESAMPLE SYSTEM (%(percent)s) REPEATABLE (0)""",
            self._exact(params),
            prepare=False,
        ).fetchone()
        assert row is not None  # an aggregate without GROUP BY always answers
        self._remember_phrase_hits(str(row[0]), {})
        sampled = max(1, int(row[1]))
        for phrase, hits in zip(wanted, map(int, row[2:]), strict=True):
            self._phrase_samples[phrase] = hits * total_rows / sampled
            if hits >= SAMPLE_MIN_HITS:
                self._phrase_hits[phrase] = round(hits * total_rows / sampled)

    def _frequencies_from_statistics(self, phrases: Sequence[str], total_rows: int) -> list[str]:
        """Keep the document frequency of each one-word phrase the planner's statistics cover
        (see LEXEME_STATISTICS); the phrases left for the sample."""
        single = {phrase: single_lexeme(phrase) for phrase in phrases}
        if not any(single.values()):
            return list(phrases)
        shares, drift = self._lexeme_shares()
        left = []
        for phrase, word in single.items():
            share = None
            if word is not None and shares:
                lexeme, prefix = word
                if prefix:
                    listed = [f for e, f in shares.items() if e.startswith(lexeme)]
                    share = 1 - math.prod(1 - f for f in listed) if listed else None
                else:
                    share = shares.get(lexeme)
            estimate = None if share is None else share * total_rows
            if estimate is None or drift > STATS_DRIFT_SHARE * estimate:
                left.append(phrase)
                continue
            self._phrase_samples[phrase] = estimate
            self._phrase_hits[phrase] = max(1, round(estimate))
        return left

    def _lexeme_shares(self) -> tuple[dict[str, float], int]:
        """The share of the lexical rows holding each of the most common lexemes, as the last
        ANALYZE counted them (read once per ANALYZE and process), and how many lexical rows were
        written or deleted since (the cumulative statistics, which may lag a write by seconds)."""
        row = self._analyzed_state  # read by this search's first statement
        if row is None:
            return {}, 0
        drift, analyzed = row
        kept = learned(self.url, KEPT_COUNTS, KeptCounts)
        if kept.analyzed == analyzed:
            return kept.shares, drift
        listed = self.conn.execute(
            """SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs
               FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename
                    JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = s.schemaname
               WHERE c.oid = 'chunks_fts'::regclass AND s.attname = 'document'""",
            prepare=False,
        ).fetchone()
        shares: dict[str, float] = {}
        if listed is not None and listed[0] is not None:
            # the frequencies end with the lowest, the highest and the null share: not lexemes'
            shares = dict(zip(listed[0], map(float, listed[1][: len(listed[0])]), strict=True))
        kept.analyzed, kept.shares = analyzed, shares
        return shares, drift

    def _count_phrase_hits(self, phrases: Sequence[str]) -> None:
        """Count the chunks holding each phrase over the whole index (one scan of their matches)."""
        params: dict[str, object] = {f"q{i}": phrase for i, phrase in enumerate(phrases)}
        params["any"] = " | ".join(f"({phrase})" for phrase in phrases)
        counts = ", ".join(f"count(*) FILTER (WHERE document @@ %(q{i})s::tsquery)" for i in range(len(phrases)))
        row = self.conn.execute(
            f"""SELECT (SELECT {LEXICAL_VERSION_SQL} FROM fts_stats), {counts}
                FROM chunks_fts WHERE document @@ %(any)s::tsquery""",
            self._exact(params),
            prepare=False,
        ).fetchone()
        assert row is not None  # an aggregate without GROUP BY always answers
        self._remember_phrase_hits(str(row[0]), dict(zip(phrases, map(int, row[1:]), strict=True)))

    def _remember_phrase_hits(self, version: str, hits: dict[str, int]) -> None:
        """Keep document frequencies for the lexical rows' `version`; a new version (any write
        since) forgets the older counts. Bounded: a long-lived server sees unbounded queries."""
        if version != self._phrase_hits_key or len(self._phrase_hits) + len(self._phrase_samples) > PHRASE_HITS_KEPT:
            # shared by the process's stores of this index at this version: a server opens a store
            # per call, whose own counts would start empty every time
            kept = learned(self.url, KEPT_COUNTS, KeptCounts)
            if kept.version != version or len(kept.hits) + len(kept.samples) > PHRASE_HITS_KEPT:
                kept.version, kept.hits, kept.samples = version, {}, {}
            self._phrase_hits_key, self._phrase_hits, self._phrase_samples = kept.version, kept.hits, kept.samples
        self._phrase_hits.update(hits)


def _frequencies_sql(phrases: int) -> str:
    """Each phrase's frequency in `f.document` as t0, t1, ...: ts_rank_cd's covers, one per hit."""
    return ", ".join(
        f"ts_rank_cd('{RANK_WEIGHTS}', f.document, %(q{i})s::tsquery, 0)::float8 / 0.5 AS t{i}" for i in range(phrases)
    )


def _phrase_sets_reaching(parts: Sequence[float], floor: float) -> list[tuple[int, ...]] | None:
    """The smallest sets of phrases (by index) whose parts sum to at least `floor` (a little
    less: a rounding error must not leave a chunk out), each set once; None when there are more
    than SETTLING_MAX_SETS. A chunk holding none of them scores less than the floor."""
    reach = floor * (1 - 1e-9) - 1e-12
    order = sorted((i for i, part in enumerate(parts) if part > 0), key=lambda i: -parts[i])
    remaining = [0.0] * (len(order) + 1)
    for n in range(len(order) - 1, -1, -1):
        remaining[n] = remaining[n + 1] + parts[order[n]]
    sets: list[tuple[int, ...]] = []
    visits = [0]

    def extend(start: int, chosen: tuple[int, ...], total: float) -> bool:
        visits[0] += 1
        if visits[0] > 100 * SETTLING_MAX_SETS:
            return False
        for n in range(start, len(order)):
            if total + remaining[n] < reach:
                return True  # nor can any later, smaller part
            picked = (*chosen, order[n])
            if total + parts[order[n]] >= reach:  # minimal: without its smallest part it falls short
                sets.append(tuple(sorted(picked)))
                if len(sets) > SETTLING_MAX_SETS:
                    return False
            elif not extend(n + 1, picked, total + parts[order[n]]):
                return False
        return True

    return sets if extend(0, (), 0.0) else None


def _within(
    where: str, params: dict[str, object], within: tuple[str, dict[str, object]] | None
) -> tuple[str, dict[str, object]]:
    """`where` also meeting the condition `within` (None: as it is)."""
    if within is None:
        return where, params
    return f"({where}) AND {within[0]}", {**params, **within[1]}


def _idfs(found: Sequence[int], total_rows: int) -> list[float]:
    """FTS5's idf of each phrase from its document frequency."""
    return [max(1e-6, math.log((total_rows - n_hit + 0.5) / (n_hit + 0.5))) for n_hit in found]
