"""Detection benchmarks for `tcqa-data decontaminate` (not tests; numbers go to BENCHMARKS.md).

quality: inject benchmark items (MC-TACO question+sentence, SQuAD passage+question) into the real
    wiki sample in known ways, index the result, and measure recall per injection kind and the
    false-positive rate on items never injected, for each flag rule and for lm-eval's Janitor.
speed:  build an index over >= 1 GB of corpus (the wiki sample plus letter-permuted copies, so the
    copies add new n-grams instead of repeating the sample's) and time flagging all 13,225 MC-TACO
    and 10,570 SQuAD docs.

    NLTK_DATA=../shared/data/nltk_data .venv/bin/python scripts/bench_detect.py quality
    NLTK_DATA=../shared/data/nltk_data .venv/bin/python scripts/bench_detect.py speed --size-gb 1.0

Work files go under .bench/ (git-ignored); `speed` deletes its corpus and index unless --keep.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import os
import random
import shutil
import string
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
os.environ.setdefault("NLTK_DATA", str(DATA / "nltk_data"))

RULES = ["any-ngram", "ngram-fraction>=0.5", "longest>=20", "minhash>=0.5", "minhash>=0.8",
         "any-ngram|minhash>=0.5", "ngram-fraction>=0.5|minhash>=0.8"]
KINDS = ["verbatim", "case", "punctuation", "whitespace", "edit_5pct", "edit_10pct", "spread_lines",
         "embedded_long", "sentence_only", "question_only"]


# ---- benchmark items -------------------------------------------------------------------------
def load_items() -> list[dict]:
    """One item per distinct MC-TACO sentence and per distinct SQuAD passage (so no two items share
    text, and injecting one never contaminates another)."""
    from tcqa_data.prep.taskspec import TaskSpec

    items = []
    seen: set[str] = set()
    mc = TaskSpec.resolve("mc_taco")
    for name in ("dev_3783.tsv", "test_9442.tsv"):
        with open(DATA / "mc_taco" / name, encoding="utf-8") as fh:
            for r in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
                if r[0] in seen:
                    continue
                seen.add(r[0])
                doc = {"sentence": r[0], "question": r[1]}
                items.append({"bench": "mc_taco", "query": mc.decontamination_query(doc),
                              "main": r[0], "question": r[1], "fields": {"question": r[1], "sentence": r[0]}})
    with open(DATA / "based_squad" / "validation.jsonl", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            if d["context"] in seen:
                continue
            seen.add(d["context"])
            items.append({"bench": "squad", "query": d["text"], "main": d["context"],
                          "question": d["question"],
                          "fields": {"context": d["context"], "question": d["question"]}})
    return items


def read_corpus() -> list[dict]:
    with open(DATA / "corpus" / "wiki_sample.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


# ---- perturbations ---------------------------------------------------------------------------
def _case(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    out = []
    for w in words:
        r = rng.random()
        out.append(w.upper() if r < 0.2 else w.lower() if r < 0.5 else w.title() if r < 0.6 else w)
    return " ".join(out)


def _punct(text: str, rng: random.Random) -> str:
    out = []
    for ch in text:
        if ch in string.punctuation and rng.random() < 0.5:
            continue  # drop half of the punctuation
        out.append(ch)
        if ch == " " and rng.random() < 0.1:
            out[-1] = rng.choice([", ", "; ", " - ", ": ", "... "])
    return "".join(out)


def _whitespace(text: str, rng: random.Random) -> str:
    return "".join(rng.choice(["  ", "\t", " \n", "   "]) if ch == " " and rng.random() < 0.4 else ch
                   for ch in text)


def _edit(text: str, frac: float, rng: random.Random, vocab: list[str]) -> str:
    words = text.split()
    k = max(1, round(frac * len(words)))
    for _ in range(k):
        op = rng.choice(["replace", "insert", "delete", "transpose"])
        i = rng.randrange(len(words))
        if op == "replace":
            words[i] = rng.choice(vocab)
        elif op == "insert":
            words.insert(i, rng.choice(vocab))
        elif op == "delete" and len(words) > 2:
            del words[i]
        elif op == "transpose" and i + 1 < len(words):
            words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


def _spread(text: str, rng: random.Random) -> str:
    words = text.split()
    lines, i = [], 0
    while i < len(words):
        k = rng.randint(4, 9)
        lines.append(" ".join(words[i:i + k]))
        i += k
    return "\n".join(lines)


def perturb(item: dict, kind: str, rng: random.Random, vocab: list[str]) -> str:
    q = item["query"]
    if kind in ("verbatim", "embedded_long"):
        return q
    if kind == "case":
        return _case(q, rng)
    if kind == "punctuation":
        return _punct(q, rng)
    if kind == "whitespace":
        return _whitespace(q, rng)
    if kind == "edit_5pct":
        return _edit(q, 0.05, rng, vocab)
    if kind == "edit_10pct":
        return _edit(q, 0.10, rng, vocab)
    if kind == "spread_lines":
        return _spread(q, rng)
    if kind == "sentence_only":
        return item["main"]
    if kind == "question_only":
        return item["question"]
    raise ValueError(kind)


def inject(corpus: list[dict], items: list[dict], assign: dict[int, str], seed: int, vocab: list[str]
           ) -> list[dict]:
    """A copy of the corpus with each assigned item's text inserted into a host article."""
    rng = random.Random(seed)
    docs = [dict(d) for d in corpus]
    long_hosts = [i for i, d in enumerate(docs) if len(d["text"].split()) > 5000]
    n_embedded = sum(k == "embedded_long" for k in assign.values())
    # one long host per embedded item, so a later cut never lands inside an earlier item
    hosts = iter(rng.sample(long_hosts, n_embedded))
    # embedded items first: their cut points are then always in original text, and the later
    # paragraph insertions never split anything
    for idx, kind in sorted(assign.items(), key=lambda t: (t[1] != "embedded_long", t[0])):
        text = perturb(items[idx], kind, rng, vocab)
        items[idx]["injected_text"] = text
        if kind == "embedded_long":
            # inside a paragraph of a long article, right after a sentence end
            h = next(hosts)
            t = docs[h]["text"]
            cut = t.find(". ", rng.randrange(len(t) // 4, 3 * len(t) // 4))
            cut = cut + 2 if cut > 0 else len(t)
            docs[h]["text"] = t[:cut] + text + " " + t[cut:]
        else:
            h = rng.randrange(len(docs))
            paras = docs[h]["text"].split("\n")
            paras.insert(rng.randrange(len(paras) + 1), text)
            docs[h]["text"] = "\n".join(paras)
        items[idx]["injected_into"] = docs[h]["title"]
    return docs


def write_jsonl(path: Path, docs: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"title": d["title"], "text": d["text"]}, ensure_ascii=False) + "\n")


def _jwords(text: str) -> list[str]:
    """Janitor normalization, written out (ASCII lowercase, drop ASCII punctuation, split)."""
    return text.translate(_JTABLE).split()


_JTABLE = str.maketrans(string.ascii_uppercase, string.ascii_lowercase, string.punctuation)


def unflagged_pool(flags: dict, rules: list[str], k: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """Items the original corpus already flags under any rule cannot serve as positives or
    negatives: the flags, and the other items' indices in a seeded random order."""
    pre = np.zeros(k, dtype=bool)
    for r in rules:
        pre |= flags[r]
    pool = [i for i in range(k) if not pre[i]]
    random.Random(seed).shuffle(pool)
    return pre, pool


def split_negatives(items: list[dict], pool: list[int], injected: list[int], text_key: str
                    ) -> tuple[list[int], list[int]]:
    """Never-injected items of ``pool``: those sharing no 13-gram with an injected text, and those
    that do (benchmark-internal duplicates, e.g. overlapping SQuAD passages: really in the corpus
    now, so left out of the false-positive rate and counted separately)."""
    injected_grams = set()
    for i in injected:
        w = _jwords(items[i][text_key])
        injected_grams.update(" ".join(w[j:j + 13]) for j in range(len(w) - 12))
    chosen = set(injected)
    negatives, dup = [], []
    for i in pool:
        if i in chosen:
            continue
        w = _jwords(items[i]["query"])
        grams = {" ".join(w[j:j + 13]) for j in range(len(w) - 12)}
        (dup if grams & injected_grams else negatives).append(i)
    return negatives, dup


# ---- scoring ---------------------------------------------------------------------------------
def score(items: list[dict], index_dir: Path) -> dict[str, np.ndarray]:
    from tcqa_data.decontam.detect.evidence import IndexEvidence
    from tcqa_data.decontam.detect.rules import Rule
    from tcqa_data.decontam.detect.score import QueryDoc, score_docs

    queries = [QueryDoc(it["query"], it["fields"]) for it in items]
    cols = score_docs(queries, IndexEvidence.open(index_dir), 13)
    out = {"ngram_fraction": np.asarray(cols["ngram_fraction"]), "longest": np.asarray(cols["longest_match"]),
           "minhash": np.asarray(cols["minhash_sim"]), "query_words": np.asarray(cols["query_words"])}
    for r in RULES:
        out[r] = Rule.parse(r).evaluate(cols)[0]
    return out


def janitor_flags(items: list[dict], corpus_docs: list[dict]) -> np.ndarray:
    """lm-eval's Janitor (python mode): an item is flagged when any of its registered 13-grams
    occurs in a corpus doc, the corpus n-grams formed the way Janitor.clean_python forms them."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from lm_eval.decontamination.janitor import Janitor, word_ngrams, word_ngrams_indices

        jan = Janitor(ngram_n=13)
    owner: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        for g in word_ngrams(jan.normalize_string(it["query"]), 13):
            owner.setdefault(g, []).append(i)
    flagged = np.zeros(len(items), dtype=bool)
    for d in corpus_docs:
        for g, _ in word_ngrams_indices(d["text"], 13):
            hit = owner.get(jan.normalize_string(g))
            if hit:
                flagged[hit] = True
    return flagged


def build(inputs: list[str], out: Path, **kw) -> dict:
    from tcqa_data.decontam.build import build_index

    if out.exists():
        shutil.rmtree(out)
    return build_index(inputs, out, id_field="title", quiet=True, **kw)


def quality(args: argparse.Namespace) -> None:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = read_corpus()
    items = load_items()
    t0 = time.perf_counter()
    base_idx = work / "index_orig"
    mh = True
    if args.mh_threshold is not None or args.sentence_splitter:
        from tcqa_data.decontam.minhash import MinHashParams

        mh_kw = {"threshold": args.mh_threshold} if args.mh_threshold is not None else {}
        if args.sentence_splitter:
            mh_kw["sentence_splitter"] = args.sentence_splitter
        mh = MinHashParams(**mh_kw)
    build([str(DATA / "corpus" / "wiki_sample.jsonl")], base_idx, workers=args.workers, minhash=mh)
    base = score(items, base_idx)
    pre, pool = unflagged_pool(base, RULES, len(items), args.seed)
    assign: dict[int, str] = {}
    for bench in ("mc_taco", "squad"):
        mine = [i for i in pool if items[i]["bench"] == bench]
        for k, kind in enumerate(KINDS):
            for i in mine[k * args.per_kind:(k + 1) * args.per_kind]:
                assign[i] = kind
    vocab = sorted({w for d in corpus[:50] for w in d["text"].split() if w.isalpha()})
    injected = inject(corpus, items, assign, args.seed, vocab)
    path = work / "corpus_injected.jsonl"
    write_jsonl(path, injected)
    idx = work / "index_injected"
    build([str(path)], idx, workers=args.workers, minhash=mh)
    t_build = time.perf_counter() - t0
    res = score(items, idx)
    jan = janitor_flags(items, injected)
    negatives, dup_negatives = split_negatives(items, pool, list(assign), "injected_text")
    rows = []
    rule_names = RULES + ["janitor (lm-eval)"]

    def flags(rule: str) -> np.ndarray:
        return jan if rule.startswith("janitor") else res[rule]

    for bench in ("mc_taco", "squad", "all"):
        sel_b = [i for i in assign if bench == "all" or items[i]["bench"] == bench]
        for kind in KINDS:
            sel = [i for i in sel_b if assign[i] == kind]
            rows.append({"bench": bench, "kind": kind, "n": len(sel),
                         **{r: float(flags(r)[sel].mean()) if sel else float("nan") for r in rule_names}})
        neg = [i for i in negatives if bench == "all" or items[i]["bench"] == bench]
        rows.append({"bench": bench, "kind": "FPR (never injected)", "n": len(neg),
                     **{r: float(flags(r)[neg].mean()) if neg else float("nan") for r in rule_names}})
    misses = []
    for i, kind in sorted(assign.items(), key=lambda t: (KINDS.index(t[1]), t[0])):
        missed = [r for r in ("any-ngram", "any-ngram|minhash>=0.5") if not res[r][i]]
        if missed and kind not in ("question_only",):
            misses.append({"bench": items[i]["bench"], "kind": kind, "missed_by": missed,
                           "query_words": int(res["query_words"][i]), "longest": int(res["longest"][i]),
                           "fraction": round(float(res["ngram_fraction"][i]), 3),
                           "minhash": round(float(res["minhash"][i]), 3),
                           "injected": items[i]["injected_text"][:160]})
    # Why the Janitor baseline misses items that our any-ngram finds
    jan_misses = []
    for i, kind in sorted(assign.items(), key=lambda t: (KINDS.index(t[1]), t[0])):
        if res["any-ngram"][i] and not jan[i]:
            raw = items[i]["injected_text"].split()
            jan_misses.append({"bench": items[i]["bench"], "kind": kind,
                               "punctuation_only_tokens": [t for t in raw if not _jwords(t)],
                               "injected": items[i]["injected_text"][:160]})
    fps = []
    for r in rule_names:
        for i in negatives:
            if flags(r)[i]:
                fps.append({"rule": r, "bench": items[i]["bench"], "longest": int(res["longest"][i]),
                            "minhash": round(float(res["minhash"][i]), 3), "query": items[i]["query"][:120]})
    summary = {"items": len(items), "excluded_already_in_corpus": int(pre.sum()), "pool": len(pool),
               "injected": len(assign), "negatives": len(negatives), "per_kind": args.per_kind,
               "negatives_duplicating_injected_text": len(dup_negatives),
               "minhash_params": json.loads((idx / "manifest.json").read_text())["minhash"],
               "seed": args.seed, "build_and_setup_s": round(t_build, 1), "rows": rows, "misses": misses,
               "false_positives": fps, "janitor_misses_found_by_any_ngram": jan_misses}
    (work / "quality.json").write_text(json.dumps(summary, indent=2))
    print_quality(summary, rule_names)


def print_quality(s: dict, rule_names: list[str]) -> None:
    print(f"items {s['items']} (one per distinct MC-TACO sentence / SQuAD passage); excluded as already "
          f"in the corpus: {s['excluded_already_in_corpus']}; injected {s['injected']} "
          f"({s['per_kind']} per kind per benchmark); never injected {s['negatives']} (plus "
          f"{s['negatives_duplicating_injected_text']} left out: they share a 13-gram with an injected "
          f"item); seed {s['seed']}; MinHash {s['minhash_params']}")
    for bench in ("mc_taco", "squad", "all"):
        print(f"\n**{bench}** (recall per injection kind; last row: false-positive rate)\n")
        # "|" inside a rule would split a Markdown table cell: escape it
        print("| kind | n | " + " | ".join("`" + r.replace("|", "\\|") + "`" for r in rule_names) + " |")
        print("|---|---:|" + "---:|" * len(rule_names))
        for row in s["rows"]:
            if row["bench"] != bench:
                continue
            vals = " | ".join("-" if math.isnan(row[r]) else f"{row[r]:.3f}" for r in rule_names)
            print(f"| {row['kind']} | {row['n']} | {vals} |")
    print(f"\nmisses of any-ngram or any-ngram|minhash>=0.5 (question_only left out): {len(s['misses'])}")
    for m in s["misses"][:40]:
        print(f"- {m['bench']}/{m['kind']}: missed by {m['missed_by']}; words {m['query_words']}, longest "
              f"{m['longest']}, fraction {m['fraction']}, minhash {m['minhash']}; "
              f"injected: {m['injected']!r}")
    jm = s["janitor_misses_found_by_any_ngram"]
    print(f"\nJanitor misses that any-ngram finds: {len(jm)}; with a punctuation-only token in the "
          f"injected text: {sum(bool(m['punctuation_only_tokens']) for m in jm)}")
    for m in jm[:10]:
        print(f"- {m['bench']}/{m['kind']}: tokens {m['punctuation_only_tokens']}: {m['injected']!r}")
    print(f"\nfalse positives: {len(s['false_positives'])}")
    for f in s["false_positives"][:20]:
        print(f"- {f['rule']} on {f['bench']}: longest {f['longest']}, minhash {f['minhash']}: "
              f"{f['query']!r}")


# ---- natural: edited source passages ---------------------------------------------------------
NATURAL_RULES = ["any-ngram", "any-ngram|minhash>=0.5", "aligned>=0.5", "aligned-field>=0.8",
                 "any-ngram|aligned>=0.5", "any-ngram|aligned-field>=0.8",
                 "any-ngram|aligned>=0.5|aligned-field>=0.9"]
# word edit rates of the passage (issue 9): deleted, replaced by another corpus word, swapped with the
# next word, new word inserted
EDIT_RATES = {"delete": 0.03, "replace": 0.03, "swap": 0.02, "insert": 0.02}
# alignment parameters of the run that picks positives and negatives (see natural())
SELECTION_PARAMS_DICT = {"min_len": 10, "max_mismatches": 4, "max_candidates": 8, "anchor_min_shared": 2,
                         "anchor_weak_top": 0}


def edit_passage(text: str, rng: random.Random, vocab: list[str]) -> str:
    """About 10% of the words edited, each word independently (see EDIT_RATES)."""
    words = text.split()
    out: list[str] = []
    i = 0
    cuts = [EDIT_RATES["delete"], EDIT_RATES["replace"], EDIT_RATES["swap"], EDIT_RATES["insert"]]
    while i < len(words):
        r = rng.random()
        if r < cuts[0]:
            i += 1
            continue
        r -= cuts[0]
        if r < cuts[1]:
            out.append(rng.choice(vocab))
            i += 1
            continue
        r -= cuts[1]
        if r < cuts[2] and i + 1 < len(words):
            out += [words[i + 1], words[i]]
            i += 2
            continue
        r -= cuts[2]
        if r < cuts[3]:
            out.append(rng.choice(vocab))
        out.append(words[i])
        i += 1
    return " ".join(out)


def inject_natural(corpus: list[dict], items: list[dict], chosen: list[int], seed: int, vocab: list[str]
                   ) -> list[dict]:
    """Each chosen item's text (MC-TACO: its sentence; SQuAD: its passage) is put between two sentences
    of a paragraph of a long article, and then that whole paragraph is edited (EDIT_RATES): the source
    passage was revised, not the item alone. Questions never enter the corpus. One host per item."""
    rng = random.Random(seed)
    docs = [dict(d) for d in corpus]
    hosts = [i for i, d in enumerate(docs) if len(d["text"].split()) > 2000]
    rng.shuffle(hosts)
    if len(hosts) < len(chosen):
        raise SystemExit(f"only {len(hosts)} long host articles for {len(chosen)} items")
    for idx, h in zip(chosen, hosts, strict=False):
        paras = docs[h]["text"].split("\n")
        good = [j for j, p in enumerate(paras) if len(p.split()) >= 60 and p.count(". ") >= 2]
        j = rng.choice(good) if good else max(range(len(paras)), key=lambda t: len(paras[t]))
        p = paras[j]
        cuts = [k + 2 for k in range(len(p)) if p.startswith(". ", k)]
        cut = rng.choice(cuts) if cuts else len(p)
        passage = p[:cut] + items[idx]["main"].strip() + " " + p[cut:]
        paras[j] = edit_passage(passage, rng, vocab)
        docs[h]["text"] = "\n".join(paras)
        items[idx]["injected_into"] = docs[h]["title"]
        items[idx]["injected_text"] = paras[j]
    return docs


def score_natural(items: list[dict], index_dir: Path, rules: list[str], align_params) -> dict:
    from tcqa_data.decontam.detect.evidence import IndexEvidence
    from tcqa_data.decontam.detect.rules import Rule
    from tcqa_data.decontam.detect.score import QueryDoc, score_docs

    queries = [QueryDoc(it["query"], it["fields"]) for it in items]
    cols = score_docs(queries, IndexEvidence.open(index_dir), 13, align=True, align_params=align_params)
    out = {r: Rule.parse(r).evaluate(cols)[0] for r in rules}
    out["cols"] = cols
    return out


def natural(args: argparse.Namespace) -> None:
    from tcqa_data.decontam.detect.align import AlignParams
    from tcqa_data.decontam.textstore.store import store_bytes

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = read_corpus()
    items = load_items()
    sizes = [int(x) for x in args.ngram.split(",")]
    params = AlignParams(min_len=args.min_len, max_mismatches=args.max_mismatches,
                         anchor_min_shared=args.anchor_min_shared, anchor_weak_top=args.anchor_weak_top)
    rules = list(NATURAL_RULES)
    t0 = time.perf_counter()
    base_idx = work / "index_orig"
    if not (args.reuse and (base_idx / "manifest.json").is_file()):
        build([str(DATA / "corpus" / "wiki_sample.jsonl")], base_idx, workers=args.workers, ngram_sizes=sizes)
    # positives and negatives are chosen under fixed reference parameters, not the ones under test:
    # otherwise a looser setting would exclude the items it (falsely) flags on the unedited corpus
    # and its false positives would never be counted (and --reuse would inject other items)
    base = score_natural(items, base_idx, rules, AlignParams(**SELECTION_PARAMS_DICT))
    pre, pool = unflagged_pool(base, rules, len(items), args.seed)
    chosen: list[int] = []
    for bench, k in (("mc_taco", args.mc_taco), ("squad", args.squad)):
        chosen += [i for i in pool if items[i]["bench"] == bench][:k]
    vocab = sorted({w for d in corpus[:50] for w in d["text"].split() if w.isalpha()})
    injected = inject_natural(corpus, items, chosen, args.seed, vocab)
    path = work / "corpus_natural.jsonl"
    if not (args.reuse and path.is_file()):  # rewriting would change its mtime: the text store refuses
        write_jsonl(path, injected)
    idx = work / "index_natural"
    tb = time.perf_counter()
    if not (args.reuse and (idx / "manifest.json").is_file()):
        build([str(path)], idx, workers=args.workers, ngram_sizes=sizes)
    t_build = time.perf_counter() - tb
    ts = time.perf_counter()
    res = score_natural(items, idx, rules, params)
    t_score = time.perf_counter() - ts
    cols = res["cols"]
    negatives, dup = split_negatives(items, pool, chosen, "main")
    rows = []
    for bench in ("mc_taco", "squad", "all"):
        pos = [i for i in chosen if bench == "all" or items[i]["bench"] == bench]
        neg = [i for i in negatives if bench == "all" or items[i]["bench"] == bench]
        row = {"bench": bench, "positives": len(pos), "negatives": len(neg)}
        for r in rules:
            row[r] = {"recall": float(res[r][pos].mean()) if pos else None,
                      "fp": int(res[r][neg].sum()), "fpr": float(res[r][neg].mean()) if neg else None}
        rows.append(row)

    def evidence(i: int) -> dict:
        return {"bench": items[i]["bench"], "query": items[i]["query"][:300],
                "aligned_share": round(float(cols["aligned_share"][i]), 3),
                "aligned_field_share": round(float(cols["aligned_field_share"][i]), 3),
                "aligned_field": cols["aligned_field"][i], "aligned_ref": cols["aligned_ref"][i],
                "aligned_mismatches": cols["aligned_mismatches"][i],
                "aligned_text": _marked(cols["aligned_text"][i], cols["aligned_text_marks"][i]),
                "ngram_hits": cols["ngram_hits"][i], "minhash": cols["minhash_sim"][i]}

    fps = [{"rule": r, **evidence(i)} for r in rules for i in negatives if res[r][i]]
    misses = [{"rule": r, "injected_into": items[i]["injected_into"],
               "candidates": cols["aligned_candidates"][i], "main_words": len(items[i]["main"].split()),
               **evidence(i)}
              for r in args.list_misses.split(",") for i in chosen if not res[r][i]]
    sizes_b = {"index_bytes_without_textstore": sum(p.stat().st_size for p in idx.rglob("*") if p.is_file())
               - store_bytes(idx), "textstore_bytes": store_bytes(idx), "corpus_bytes": path.stat().st_size}
    summary = {"items": len(items), "excluded_already_flagged": int(pre.sum()), "positives": len(chosen),
               "negatives": len(negatives), "negatives_sharing_injected_13grams": len(dup),
               "ngram_sizes": sizes, "align_params": params.to_dict(), "edit_rates": EDIT_RATES,
               "seed": args.seed, "build_s": round(t_build, 1), "score_s": round(t_score, 1),
               "setup_s": round(time.perf_counter() - t0, 1), **sizes_b, "rows": rows,
               "false_positives": fps, "misses": misses,
               "field_threshold_curve": field_threshold_curve(res["any-ngram"], cols, chosen, negatives,
                                                              items)}
    out = work / (f"natural_n{'-'.join(map(str, sizes))}_L{args.min_len}_k{args.max_mismatches}"
                  f"_s{args.anchor_min_shared}_w{args.anchor_weak_top}.json")
    out.write_text(json.dumps(summary, indent=2))
    print_natural(summary, rules)
    print(f"\n(written to {out})")


def field_threshold_curve(ngram: np.ndarray, cols: dict, positives: list[int], negatives: list[int],
                          items: list[dict]) -> list[dict]:
    """Recall and false positives of ``any-ngram|aligned-field>=t`` over thresholds t, per benchmark."""
    share = np.asarray(cols["aligned_field_share"], dtype=float)
    out = []
    for t in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
        flag = ngram | (share >= t)
        row: dict = {"threshold": t}
        for bench in ("mc_taco", "squad"):
            pos = [i for i in positives if items[i]["bench"] == bench]
            neg = [i for i in negatives if items[i]["bench"] == bench]
            row[bench] = {"recall": round(float(flag[pos].mean()), 3), "fp": int(flag[neg].sum())}
        out.append(row)
    return out


def _marked(text: str | None, marks: list | None) -> str | None:
    """Corpus excerpt with mismatched tokens in [brackets]."""
    if not text:
        return text
    out, pos = [], 0
    for s, e in marks or []:
        out += [text[pos:s], "[", text[s:e], "]"]
        pos = e
    out.append(text[pos:])
    return "".join(out)[:400]


def print_natural(s: dict, rules: list[str]) -> None:
    print(f"natural edits {s['edit_rates']}; n-gram sizes {s['ngram_sizes']}; "
          f"alignment {s['align_params']}; positives {s['positives']}, negatives {s['negatives']} "
          f"(excluded: {s['excluded_already_flagged']} already flagged, "
          f"{s['negatives_sharing_injected_13grams']} sharing a 13-gram with injected text); "
          f"build {s['build_s']} s, scoring {s['score_s']} s; "
          f"index {s['index_bytes_without_textstore']:,} B, text store {s['textstore_bytes']:,} B, "
          f"corpus {s['corpus_bytes']:,} B\n")
    print("| rule | " + " | ".join(f"{r['bench']} recall (n={r['positives']}) | "
                               f"{r['bench']} FP (of {r['negatives']})" for r in s["rows"]) + " |")
    print("|---|" + "---:|---:|" * len(s["rows"]))
    for rule in rules:
        cells = []
        for r in s["rows"]:
            v = r[rule]
            cells += [f"{v['recall']:.3f}" if v["recall"] is not None else "-",
                      f"{v['fp']} ({100 * v['fpr']:.2f}%)" if v["fpr"] is not None else "-"]
        print("| `" + rule.replace("|", "\\|") + "` | " + " | ".join(cells) + " |")
    print("\n`any-ngram|aligned-field>=t`: " + "; ".join(
        f"t={r['threshold']}: MC-TACO {r['mc_taco']['recall']:.3f} / {r['mc_taco']['fp']} FP, "
        f"SQuAD {r['squad']['recall']:.3f} / {r['squad']['fp']} FP" for r in s["field_threshold_curve"]))
    print(f"\nfalse positives: {len(s['false_positives'])}")
    for f in s["false_positives"][:30]:
        print(f"- {f['rule']} on {f['bench']}: share {f['aligned_share']} (field {f['aligned_field']} "
              f"{f['aligned_field_share']}), {f['aligned_mismatches']} mismatches, "
              f"corpus doc {f['aligned_ref']!r}\n"
              f"  query: {f['query'][:200]!r}\n  corpus: {f['aligned_text']!r}")
    print(f"\nmisses: {len(s['misses'])}")
    for m in s["misses"][:30]:
        print(f"- {m['rule']} on {m['bench']}: {m['main_words']} words, candidates {m['candidates']}, share "
              f"{m['aligned_share']} field {m['aligned_field_share']}, ngram hits {m['ngram_hits']}, minhash "
              f"{m['minhash']}\n  corpus: {m['aligned_text']!r}")


# ---- speed -----------------------------------------------------------------------------------
def make_big_corpus(folder: Path, size_gb: float, seed: int) -> list[str]:
    """The wiki sample, then copies whose lowercase and uppercase letters are permuted (a different
    permutation per copy): realistic token/document statistics, but new n-grams in every copy."""
    folder.mkdir(parents=True, exist_ok=True)
    src = (DATA / "corpus" / "wiki_sample.jsonl").read_text(encoding="utf-8")
    docs = [json.loads(line) for line in src.splitlines()]
    rng = random.Random(seed)
    letters = (string.ascii_lowercase + string.ascii_uppercase).encode()
    target = int(size_gb * (1 << 30))
    written, copy, paths = 0, 0, []
    while written < target:
        p = folder / f"part{copy:04d}.jsonl"
        if copy:
            lo = list(string.ascii_lowercase)
            rng.shuffle(lo)  # drawn for every copy, so a resumed run continues the same sequence
        if not p.exists():  # else written by an earlier run (each part is renamed into place whole)
            if copy == 0:
                text = src if src.endswith("\n") else src + "\n"
            else:
                # permuting ASCII letters in the UTF-8 bytes equals str.translate on the text (no
                # UTF-8 continuation byte is ASCII) and is ~20x faster
                table = bytes.maketrans(letters, ("".join(lo) + "".join(lo).upper()).encode())
                text = "\n".join(json.dumps({"title": f"{d['title']} #{copy}", "text": d["text"].encode(
                    "utf-8", "surrogatepass").translate(table).decode("utf-8", "surrogatepass")},
                    ensure_ascii=False) for d in docs) + "\n"
            tmp = p.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(p)
        written += p.stat().st_size
        paths.append(str(p))
        copy += 1
    return paths


def drop_page_cache(folders: list[Path]) -> None:
    """Evict the files' clean pages from the page cache (a cold start without root)."""
    for folder in folders:
        for p in folder.rglob("*"):
            if p.is_file():
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def speed(args: argparse.Namespace) -> None:
    from tcqa_data.decontam.textstore.store import store_bytes
    from tcqa_data.prep.pipeline import decontaminate

    work = Path(args.work)
    corpus_dir, idx = work / "corpus", work / "index"
    t0 = time.perf_counter()
    if not (idx / "manifest.json").exists():
        paths = make_big_corpus(corpus_dir, args.size_gb, args.seed)
        t_gen = time.perf_counter() - t0
        # a fresh process whose whole tree is sampled for peak memory and disk (bench_index)
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_index import timed_build

        t1 = time.perf_counter()
        # the default build: n-grams, MinHash (verified against the text store) and the text store
        measured = timed_build(paths, idx, workers=args.workers, minhash=not args.no_minhash,
                               extra={"id_field": "title", "text_store": args.text_store}, resume=args.resume,
                               memlog=Path(args.memlog) if args.memlog else None)
        t_build = time.perf_counter() - t1
    else:
        t_gen = t_build = float("nan")
        measured = {}
    man = json.loads((idx / "manifest.json").read_text())
    mc_taco = {"test": str(DATA / "mc_taco" / "test_9442.tsv"),
               "validation": str(DATA / "mc_taco" / "dev_3783.tsv")}
    files = {"mc_taco": {k: mc_taco[k] for k in args.mc_taco_splits.split(",")},
             "squad_completion": {"validation": str(DATA / "based_squad" / "validation.jsonl")}}
    results = []
    for rule in args.rules.split(","):
        if "minhash" in rule and not man.get("minhash"):
            continue
        for run in range(args.repeat):
            out = work / "prep"
            if out.exists():
                shutil.rmtree(out)
            if args.cold:
                drop_page_cache([idx, corpus_dir])
            t, c = time.perf_counter(), time.process_time()
            load = os.getloadavg()[0]
            prof = None
            if args.profile:  # cProfile of the call (its overhead inflates the times of this run)
                import cProfile

                prof = cProfile.Profile()
                prof.enable()
            s = decontaminate(idx, ["mc_taco", "squad_completion"], out, data_files=files, rule=rule,
                              quiet=True)
            dt, cpu = time.perf_counter() - t, time.process_time() - c
            if prof is not None:
                import pstats

                prof.disable()
                Path(args.profile).mkdir(parents=True, exist_ok=True)
                tag = "".join(ch if ch.isalnum() or ch == "." else "_" for ch in rule)
                dump = Path(args.profile) / f"{tag}-{run}.prof"
                prof.dump_stats(dump)
                print(f"profile: {dump}; top by cumulative time:")
                pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
            docs = sum(c["docs"] for per in s["tasks"].values() for c in per.values())
            dirty = sum(c["dirty_docs"] for per in s["tasks"].values() for c in per.values())
            results.append({"rule": rule, "run": run, "seconds": round(dt, 2), "cpu_seconds": round(cpu, 2),
                            "load_avg_1min_at_start": round(load, 2), "docs": docs, "dirty_docs": dirty,
                            "page_cache": "cold" if args.cold else "as left by earlier runs"})
            print(f"rule {rule!r} run {run}{' (cold)' if args.cold else ''}: {docs} docs in {dt:.1f} s wall, "
                  f"{cpu:.1f} s CPU ({docs / dt:,.0f} docs/s; load {load:.1f}), {dirty} dirty", flush=True)
    info = {"corpus_bytes": man["counts"]["input_bytes"], "docs": man["counts"]["docs"],
            "unique_ngrams": man["counts"]["ngrams"]["13"]["unique"], "minhash": bool(man.get("minhash")),
            "generate_s": round(t_gen, 1), "build_s": round(t_build, 1), "workers": args.workers,
            "text_store": args.text_store, "text_store_bytes": store_bytes(idx),
            "index_bytes": sum(p.stat().st_size for p in idx.rglob("*") if p.is_file()),
            "part_bytes": {d.name: sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
                           for d in sorted(idx.iterdir()) if d.is_dir()},
            "build": measured,
            "cpus": os.cpu_count(), "results": results}
    print(json.dumps(info, indent=2))
    (work.parent / "speed.json").write_text(json.dumps(info, indent=2))
    if not args.keep:
        shutil.rmtree(work)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--work", default=str(REPO / ".bench" / "quality"))
    q.add_argument("--per-kind", type=int, default=30)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--workers", type=int, default=2)
    q.add_argument("--sentence-splitter", default=None, choices=["punkt-fast", "punkt"],
                   help="MinHash window sentence splitter (default: the library's)")
    q.add_argument("--mh-threshold", type=float, default=None,
                   help="LSH threshold of the MinHash index (default: the build default)")
    nat = sub.add_parser("natural", help="edited source passages (issue 9)")
    nat.add_argument("--work", default=str(REPO / ".bench" / "natural"))
    nat.add_argument("--mc-taco", type=int, default=150, help="MC-TACO items injected")
    nat.add_argument("--squad", type=int, default=50, help="SQuAD passages injected")
    nat.add_argument("--ngram", default="13", help="n-gram sizes of the index, e.g. 8,13")
    nat.add_argument("--min-len", type=int, default=9)
    nat.add_argument("--max-mismatches", type=int, default=4)
    nat.add_argument("--anchor-min-shared", type=int, default=2)
    nat.add_argument("--anchor-weak-top", type=int, default=2)
    nat.add_argument("--reuse", action="store_true", help="reuse the indexes of an earlier run (same seed)")
    nat.add_argument("--list-misses", default="any-ngram|aligned-field>=0.8")
    nat.add_argument("--seed", type=int, default=0)
    nat.add_argument("--workers", type=int, default=2)
    s = sub.add_parser("speed")
    s.add_argument("--work", default=str(REPO / ".bench" / "speed"))
    s.add_argument("--size-gb", type=float, default=1.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--workers", type=int, default=2)
    s.add_argument("--no-minhash", action="store_true")
    s.add_argument("--text-store", default="auto", choices=["auto", "copy", "none"],
                   help="built with the index (default auto, as index-corpus)")
    s.add_argument("--rules", default="any-ngram,any-ngram|minhash>=0.5,any-ngram|aligned-field>=0.8")
    s.add_argument("--repeat", type=int, default=2)
    s.add_argument("--keep", action="store_true")
    s.add_argument("--resume", action="store_true", help="finish an interrupted build of --work's index")
    s.add_argument("--mc-taco-splits", default="test,validation",
                   help="MC-TACO splits to flag (issue 10 names test only)")
    s.add_argument("--cold", action="store_true", help="evict the index and corpus from the page cache "
                   "before every run")
    s.add_argument("--profile", help="folder: a cProfile dump per rule and run, top costs printed "
                   "(profiled runs are slower)")
    s.add_argument("--memlog", help="JSON lines: the build's memory per second, per process and phase")
    args = ap.parse_args()
    if not DATA.is_dir():
        sys.exit(f"needs the real data at {DATA}")
    {"quality": quality, "natural": natural, "speed": speed}[args.cmd](args)


if __name__ == "__main__":
    main()
