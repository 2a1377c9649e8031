"""The pure parts of hierarchical retrieval: the tree, extractive layers, score propagation, convergence, the
layered-context budget and the intent analyser's lenient parsing."""

from __future__ import annotations

import json

import pytest

from ragstep.retrieval.hierarchy import (
    DocumentEntry,
    Exploration,
    ExploreConfig,
    LayerCandidate,
    bottom_up,
    build_tree,
    explore,
    extractive_directory_layers,
    extractive_document_layers,
    front_matter,
    propagate,
    select_layers,
)
from ragstep.retrieval.intent import intent_messages, parse_plan, session_summary, single_query_plan
from ragstep.retrieval.tokens import count_tokens

# A tree given as parent -> children; names ending in "/" are folders.
TREE = {
    "r/": ["r/a/", "r/b/", "r/top.md"],
    "r/a/": ["r/a/x.md", "r/a/deep/"],
    "r/a/deep/": ["r/a/deep/y.md"],
    "r/b/": ["r/b/z.md"],
}


def walk(own: dict[str, float], **cfg: float) -> tuple[dict[str, float], list[str]]:
    result = explore(["r/"], lambda u: TREE.get(u, []), lambda u: u.endswith("/"), own, ExploreConfig(**cfg))  # type: ignore[arg-type]
    return result.scores, result.ranking


def test_a_child_scores_half_its_own_and_half_its_parents() -> None:
    assert propagate(0.8, 0.4, 0.5) == pytest.approx(0.6)
    assert propagate(0.8, 0.0, 0.5) == 0.8  # reached from an unscored root: its own score
    assert propagate(0.8, 0.4, 0.25) == pytest.approx(0.25 * 0.8 + 0.75 * 0.4)
    scores, _ = walk({"r/a/": 0.6, "r/a/deep/": 0.2, "r/a/deep/y.md": 0.9, "r/b/z.md": 0.9}, global_topk=0)
    assert scores["r/a/"] == pytest.approx(0.6)  # a child of the root
    assert scores["r/a/deep/"] == pytest.approx(0.5 * 0.2 + 0.5 * 0.6)
    assert scores["r/a/deep/y.md"] == pytest.approx(0.5 * 0.9 + 0.5 * 0.4)
    # r/b/ has no score of its own and nothing above it: neither it nor its document is reached.
    assert "r/b/z.md" not in scores and "r/b/" not in scores


def test_the_global_search_starts_the_walk_at_the_best_folders() -> None:
    own = {"r/b/": 0.0, "r/a/deep/": 0.7, "r/a/deep/y.md": 0.9, "r/b/z.md": 0.5, "r/a/x.md": 0.1}
    parents = {"r/a/deep/y.md": "r/a/deep/", "r/b/z.md": "r/b/", "r/a/x.md": "r/a/"}

    def run(topk: int, limit: int = 3) -> Exploration:
        cfg = ExploreConfig(global_topk=topk, limit=limit)
        return explore(["r/"], lambda u: TREE.get(u, []), lambda u: u.endswith("/"), own, cfg, parents.get)

    result = run(3)
    # The best max(limit, 3) = 3 nodes: y.md (0.9), deep/ (0.7), z.md (0.5). deep/ starts at its own score; a
    # document's folder starts at the folder's own score (r/b/: 0), not the document's; x.md (fourth) is left out.
    assert result.starting_points == [("r/", 0.0), ("r/a/deep/", 0.7), ("r/b/", 0.0)]
    # The documents found are results, ranked as every document: half their own score, half their folder's.
    assert result.scores["r/a/deep/y.md"] == pytest.approx(0.5 * 0.9 + 0.5 * 0.7)
    assert result.ranking[0] == "r/a/deep/y.md"
    assert result.scores["r/b/z.md"] == pytest.approx(0.5 * 0.5)  # its folder scored nothing
    # OpenViking asks the global search for max(limit, GLOBAL_SEARCH_TOPK) hits: a larger limit reaches x.md too.
    wide = run(3, limit=4)
    assert ("r/a/", 0.0) in wide.starting_points
    assert wide.scores["r/a/x.md"] == pytest.approx(0.5 * 0.1)
    assert "r/a/deep/y.md" not in run(0).scores  # without the global search nothing leads there


def test_a_strong_document_does_not_lift_its_siblings() -> None:
    # x.md is the best match anywhere, but its folder scored little: its sibling stays below the other folder's
    # document (0.5 x 0.4 + 0.5 x 0.1 = 0.25 < 0.6), as it would if x.md had not been found at all; and x.md
    # itself ranks by the same rule as every document (0.5 x 1.0 + 0.5 x 0.1), below the match in a strong folder.
    own = {"r/a/x.md": 1.0, "r/a/": 0.1, "r/a/deep/": 0.4, "r/b/": 0.6, "r/b/z.md": 0.6}
    parents = {"r/a/x.md": "r/a/", "r/b/z.md": "r/b/", "r/a/deep/": "r/a/"}
    tree = {"r/": ["r/a/", "r/b/"], "r/a/": ["r/a/deep/", "r/a/x.md"], "r/b/": ["r/b/z.md"], "r/a/deep/": []}
    cfg = ExploreConfig(limit=3)
    result = explore(["r/"], lambda u: tree.get(u, []), lambda u: u.endswith("/"), own, cfg, parents.get)
    assert result.ranking[:3] == ["r/b/", "r/b/z.md", "r/a/x.md"]
    assert result.scores["r/a/x.md"] == pytest.approx(0.55)
    assert result.scores["r/b/z.md"] == pytest.approx(0.6) and result.scores["r/a/deep/"] == pytest.approx(0.25)


def test_a_strong_folder_lifts_its_documents_over_a_lone_match() -> None:
    own = {"r/a/": 0.9, "r/a/x.md": 0.5, "r/top.md": 0.6}
    _, ranking = walk(own, global_topk=0)
    assert ranking.index("r/a/x.md") < ranking.index("r/top.md")  # 0.7 against 0.6


def test_the_global_search_hits_are_ranked_with_their_folders_score() -> None:
    # x.md is the best raw hit, but its folder scored nothing; z.md's folder matched the query: z.md ranks first, and
    # x.md is still returned (what flat search finds is not lost).
    own = {"r/a/x.md": 0.9, "r/b/": 0.8, "r/b/z.md": 0.7}
    parents = {"r/a/x.md": "r/a/", "r/b/z.md": "r/b/"}
    result = explore(["r/"], lambda u: TREE.get(u, []), lambda u: u.endswith("/"), own, ExploreConfig(), parents.get)
    assert result.scores["r/b/z.md"] == pytest.approx(0.5 * 0.7 + 0.5 * 0.8)
    assert result.scores["r/a/x.md"] == pytest.approx(0.5 * 0.9)
    assert result.ranking.index("r/b/z.md") < result.ranking.index("r/a/x.md")


def test_reranked_sub_folders_open_a_folder_the_search_missed() -> None:
    own = {"r/a/x.md": 0.4, "r/b/z.md": 0.5}
    asked: list[list[str]] = []

    def rerank(uris: list[str]) -> list[float]:
        asked.append(uris)
        return [1.0 if u == "r/a/" else 0.0 for u in uris]

    tree = lambda u: TREE.get(u, [])  # noqa: E731
    plain = explore(["r/"], tree, lambda u: u.endswith("/"), own, ExploreConfig(global_topk=0))
    assert plain.scores == {}  # no folder was found: the walk ends at the root
    result = explore(["r/"], tree, lambda u: u.endswith("/"), own, ExploreConfig(global_topk=0), rerank_children=rerank)
    # a/ scores the mean of its search score (0) and its rerank score (1.0); x.md blends its own 0.4 with that.
    assert result.scores["r/a/"] == pytest.approx(0.5)
    assert result.scores["r/a/x.md"] == pytest.approx(0.5 * 0.4 + 0.5 * 0.5)
    assert "r/b/z.md" not in result.scores  # b/ scored nothing either way: not opened
    assert asked == [["r/a/", "r/b/"], ["r/a/deep/"]]  # only sub-folders are reranked


def test_the_threshold_keeps_weak_children_out_and_unexplored() -> None:
    own = {"r/a/": 0.3, "r/a/x.md": 0.05, "r/a/deep/": 0.05, "r/a/deep/y.md": 1.0}
    scores, _ = walk(own, global_topk=0, threshold=0.2)
    # x.md and deep/ blend to 0.175: not collected, and deep/ is never opened, so y.md (1.0 of its own) is not seen.
    assert scores == {"r/a/": pytest.approx(0.3)}
    scores, _ = walk(own, global_topk=0, threshold=0.1)
    assert scores["r/a/deep/y.md"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.175)


def test_only_children_the_search_found_are_taken_the_best_first() -> None:
    scores, _ = walk({"r/a/": 0.9, "r/a/x.md": 0.0, "r/top.md": 0.2}, global_topk=0)
    assert set(scores) == {"r/a/", "r/top.md"}  # x.md scored nothing: its folder alone does not lift it
    tree = {"r/": [f"r/d{i:02}.md" for i in range(30)]}
    own = {f"r/d{i:02}.md": 1.0 - i / 100 for i in range(30)}
    result = explore(["r/"], lambda u: tree.get(u, []), lambda u: u.endswith("/"), own, ExploreConfig(limit=5))
    assert sorted(result.scores) == [f"r/d{i:02}.md" for i in range(20)]  # max(2 x 5, 20) of a folder's children


def _wide(folders: int) -> tuple[dict[str, list[str]], dict[str, float]]:
    tree = {"r/": [f"r/f{i}/" for i in range(folders)]}
    own: dict[str, float] = {}
    for i in range(folders):
        tree[f"r/f{i}/"] = [f"r/f{i}/d.md"]
        own[f"r/f{i}/"] = 1.0 - i / folders  # folder 0 best, then worse and worse
        own[f"r/f{i}/d.md"] = 0.5
    return tree, own


def test_the_walk_stops_after_three_rounds_without_a_change_in_the_top_k() -> None:
    tree, own = _wide(20)
    cfg = ExploreConfig(limit=3, global_topk=0, max_convergence_rounds=3)
    result = explore(["r/"], lambda u: tree.get(u, []), lambda u: u.endswith("/"), own, cfg)
    # Round 1 (the root) collects the 20 folders: top 3 = f0, f1, f2. Rounds 2-4 expand f0, f1, f2, whose documents
    # (0.75 and below) never enter the top 3: unchanged 3 times in a row, the walk ends after round 4.
    assert result.converged
    assert result.rounds == 4
    assert result.visited == ["r/", "r/f0/", "r/f1/", "r/f2/"]
    patient = explore(
        ["r/"], lambda u: tree.get(u, []), lambda u: u.endswith("/"), own, ExploreConfig(limit=3, global_topk=0,
                                                                                          max_convergence_rounds=50)
    )  # fmt: skip
    assert not patient.converged and patient.rounds == 21  # the root and every folder


def test_convergence_needs_a_full_top_k() -> None:
    tree, own = _wide(4)
    result = explore(["r/"], lambda u: tree.get(u, []), lambda u: u.endswith("/"), own, ExploreConfig(limit=50))
    assert not result.converged and len(result.scores) == 8


def test_the_tree_has_a_node_per_folder_and_document() -> None:
    docs = [DocumentEntry("guide/install.md", "k1", "install"), DocumentEntry("index.md", "k2", "index"),
            DocumentEntry("guide/deep/more.md", "k3", "more")]  # fmt: skip
    nodes = build_tree("handbook", docs, {})
    assert sorted(nodes) == [
        "ragstep://handbook/",
        "ragstep://handbook/guide/",
        "ragstep://handbook/guide/deep/",
        "ragstep://handbook/guide/deep/more.md",
        "ragstep://handbook/guide/install.md",
        "ragstep://handbook/index.md",
    ]
    install = nodes["ragstep://handbook/guide/install.md"]
    assert install.parent == "ragstep://handbook/guide/" and install.knowledge_id == "k1" and install.is_leaf
    assert nodes["ragstep://handbook/guide/"].children == [
        "ragstep://handbook/guide/deep/",
        "ragstep://handbook/guide/install.md",
    ]
    order = bottom_up(nodes)
    assert order.index("ragstep://handbook/guide/deep/") < order.index("ragstep://handbook/guide/")
    assert order[-1] == "ragstep://handbook/"
    # Layers made before are kept (the refresh decides what to regenerate).
    kept = {u: n.model_copy(update={"abstract": "A", "signature": "s"}) for u, n in nodes.items()}
    again = build_tree("handbook", docs[:1], kept)
    assert again["ragstep://handbook/guide/install.md"].abstract == "A"
    assert "ragstep://handbook/index.md" not in again


def test_extractive_layers_read_the_first_heading_and_leading_sentences() -> None:
    text = (
        "# Installing\n\n```\npip install x\n```\nUse pip. It needs Python 3.11. Set TOOL_HOME first.\n\n## Offline\n"
    )
    abstract, overview = extractive_document_layers("install", text, abstract_tokens=16, overview_tokens=200)
    assert abstract == "Installing: Use pip. It needs Python 3.11."
    assert "Sections: Installing; Offline" in overview and "TOOL_HOME" in overview
    assert count_tokens(abstract) == 16  # heading and two sentences; the third ("Set TOOL_HOME first.") would not fit
    nodes = build_tree("kb", [DocumentEntry("a.md", "k", "alpha"), DocumentEntry("b.md", "k2", "beta")], {})
    children = [nodes["ragstep://kb/a.md"], nodes["ragstep://kb/b.md"]]
    abstract, overview = extractive_directory_layers("docs", children, abstract_tokens=60, overview_tokens=500)
    assert abstract == "docs: alpha, beta" and overview.startswith("docs holds 2 items.")


def test_layers_fill_the_budget_best_first_and_never_pass_it() -> None:
    def c(uri: str, score: float, passages: tuple[str, ...] = ()) -> LayerCandidate:
        return LayerCandidate(uri, score, f"abstract of {uri}", f"overview of {uri} " * 5, passages)

    passages = ("one two three four " * 10, "five six seven eight " * 10, "nine ten " * 200)
    candidates = [c("d1", 0.9, passages), c("d2", 0.8, passages), c("d3", 0.7), c("d4", 0.6)]
    layered = select_layers(candidates, 200, l1_top=1, l2_top=1)
    assert [(i.uri, i.layer) for i in layered.items] == [("d1", "L2"), ("d2", "L1"), ("d3", "L0"), ("d4", "L0")]
    # d1 got the passages that fit (not the long third one); the total is what the items cost, within budget.
    assert layered.items[0].text.count("\n") == 1
    assert layered.used == sum(i.tokens for i in layered.items) <= 200
    small = select_layers(candidates, 7, l1_top=3, l2_top=1)
    assert [i.layer for i in small.items] == ["L0"] and small.used <= 7  # one abstract (5 tokens) fits, no more
    assert select_layers(candidates, 0, l1_top=3, l2_top=1).items == []


def _plan(text: str) -> list[tuple[str, str, int]]:
    plan = parse_plan(text)
    assert plan is not None
    return [(q.query, q.context_type, q.priority) for q in plan.queries]


def test_typed_queries_are_read_leniently() -> None:
    answer = {"reasoning": "r", "queries": [
        {"query": "offline installation", "context_type": "resource", "intent": "i", "priority": 2},
        {"Query": "user's preferred OS", "Context Type": "memories", "priority": "1"},
        {"query": "configure the proxy", "type": "skill", "priority": 9},
        {"query": "", "context_type": "resource"},
        {"query": "something", "context_type": "weather"},
        "bare string query",
        42,
    ]}  # fmt: skip
    fenced = f"Here is the plan:\n```json\n{json.dumps(answer)}\n```\nGood luck."
    assert _plan(fenced) == [
        ("user's preferred OS", "memory", 1),
        ("offline installation", "resource", 2),
        ("something", "resource", 3),
        ("bare string query", "resource", 3),
        ("configure the proxy", "skill", 5),
    ]
    plan = parse_plan(json.dumps({"queries": [{"query": f"q{i}"} for i in range(9)] + [{"query": "q0"}]}))
    assert plan is not None and [q.query for q in plan.queries] == ["q0", "q1", "q2", "q3", "q4"]
    assert _plan('[{"query": "a list"}]') == [("a list", "resource", 3)]


def test_zero_queries_is_a_plan_and_unreadable_output_is_not() -> None:
    plan = parse_plan('{"reasoning": "a greeting", "queries": []}')
    assert plan is not None and plan.queries == [] and plan.reasoning == "a greeting"
    for bad in ("Sure! I would search for the install guide.", '{"queries": "install"}', "{broken json", ""):
        assert parse_plan(bad) is None, bad
    fallback = single_query_plan("how do I install?", "no chat model")
    assert [(q.query, q.context_type) for q in fallback.queries] == [("how do I install?", "resource")]


def test_the_analyser_reads_the_summary_the_last_messages_and_the_query() -> None:
    messages = intent_messages("and offline?", [("user", "how to install"), ("assistant", "use pip")], "installing")
    assert messages[0][0] == "system" and "0 to 5 queries" in messages[0][1]
    user = messages[1][1]
    assert user.index("installing") < user.index("user: how to install") < user.index("Current message:\nand offline?")


def test_rescore_replaces_the_starting_points_scores() -> None:
    # A rerank model's verdict on the global hits' abstracts (here: z.md first) decides where the walk starts.
    own = {"r/a/deep/y.md": 0.9, "r/b/z.md": 0.5}
    parents = {"r/a/deep/y.md": "r/a/deep/", "r/b/z.md": "r/b/"}
    asked: list[list[str]] = []

    def rescore(uris: list[str]) -> list[float]:
        asked.append(uris)
        return [0.2 if u.endswith("y.md") else 0.95 for u in uris]

    cfg = ExploreConfig(limit=3)
    tree = lambda u: TREE.get(u, [])  # noqa: E731
    result = explore(["r/"], tree, lambda u: u.endswith("/"), own, cfg, parents.get, rescore)
    assert asked == [["r/a/deep/y.md", "r/b/z.md"]]
    # The rerank model's scores are the documents' own scores in the final blend (their folders scored nothing).
    assert result.scores["r/b/z.md"] == pytest.approx(0.5 * 0.95)
    assert result.scores["r/a/deep/y.md"] == pytest.approx(0.5 * 0.2)
    assert result.ranking[0] == "r/b/z.md"


def test_the_session_summary_compresses_the_earlier_turns() -> None:
    turns = [(f"question {i} about proxies", f"Answer {i} first. Then more detail.") for i in range(1, 4)]
    assert session_summary(turns) == "\n".join(
        f"- asked: question {i} about proxies -> Answer {i} first." for i in range(1, 4)
    )
    assert session_summary([]) == ""
    # Over budget: the newest turns stay, in order, and the summary says how many were left out.
    tight = session_summary(turns, max_tokens=count_tokens("- asked: question 3 about proxies -> Answer 3 first.") + 1)
    assert tight == "(2 earlier turns left out)\n- asked: question 3 about proxies -> Answer 3 first."


def test_front_matter_gives_the_title_and_the_abstract_not_the_text() -> None:
    text = '---\ntitle: config\nsection: 7\ndescription: "About npm configuration"\n---\n\n### Description\n\nMore.\n'
    assert front_matter(text) == (
        {"title": "config", "description": "About npm configuration"},
        text[text.index("\n\n###") + 1 :],
    )
    abstract, overview = extractive_document_layers("x", text, abstract_tokens=60, overview_tokens=200)
    assert abstract == "config: About npm configuration. More."
    assert "section: 7" not in overview and overview.startswith("config. Sections: Description")


def test_a_folder_that_is_no_evidence_does_not_lift_its_documents() -> None:
    # b/ scored high (its words matched), but the caller says it is no evidence: z.md ranks at half its own score,
    # as a document whose folder scored nothing, and x.md (whose folder counts) passes it.
    own = {"r/a/": 0.4, "r/a/x.md": 0.7, "r/b/": 0.9, "r/b/z.md": 0.8}
    parents = {"r/a/x.md": "r/a/", "r/b/z.md": "r/b/"}
    tree = lambda u: TREE.get(u, [])  # noqa: E731
    lifted = explore(["r/"], tree, lambda u: u.endswith("/"), own, ExploreConfig(), parents.get)
    assert lifted.scores["r/b/z.md"] == pytest.approx(0.5 * 0.8 + 0.5 * 0.9)
    assert lifted.ranking.index("r/b/z.md") < lifted.ranking.index("r/a/x.md")
    result = explore(["r/"], tree, lambda u: u.endswith("/"), own, ExploreConfig(), parents.get, None, None,
                     lambda folder: folder != "r/b/")  # fmt: skip
    assert result.scores["r/b/z.md"] == pytest.approx(0.5 * 0.8)
    assert result.scores["r/a/x.md"] == pytest.approx(0.5 * 0.7 + 0.5 * 0.4)
    assert result.ranking.index("r/a/x.md") < result.ranking.index("r/b/z.md")
    assert result.scores["r/b/"] == lifted.scores["r/b/"]  # the walk itself is unchanged: folders keep their score
